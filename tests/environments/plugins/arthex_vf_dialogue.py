"""The multi-turn variant of `arthex_vf_arith`: the same taskset, played by a harness that asks a
follow-up question after the model's first answer (two model turns per episode). Its id is
`arthex_vf_dialogue`."""

from __future__ import annotations

import verifiers.v1 as vf
from arthex_vf_arith import ArithTaskset, converse


class DialogueTaskset(ArithTaskset):
    pass


class TwoTurnHarness(vf.Harness[vf.HarnessConfig]):
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(
        self,
        ctx: vf.ModelContext,
        trace: vf.Trace,
        runtime: vf.Runtime,
        endpoint: str,
        secret: str,
        mcp_urls: dict[str, str],
        data: vf.TaskData,
    ) -> vf.ProgramResult:
        return await converse(ctx, trace, endpoint, secret, data, turns=2)


__all__ = ["DialogueTaskset", "TwoTurnHarness"]
