"""The multi-turn variant of `arthex_vf_arith`: the same taskset, played by a harness that asks a
follow-up question after the model's first answer (two model turns per episode). Its id is
`arthex_vf_dialogue`."""

from __future__ import annotations

from arthex_vf_arith import ArithTaskset, OneTurnHarness


class DialogueTaskset(ArithTaskset):
    pass


class TwoTurnHarness(OneTurnHarness):
    TURNS = 2


__all__ = ["DialogueTaskset", "TwoTurnHarness"]
