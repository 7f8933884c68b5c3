"""arthex's own inference server as the judge. The tiny random model cannot judge: it answers
junk, and that is the point: the failure path (one corrective retry, then a typed error or a
counted, swallowed failure, with every token it cost recorded) runs against a real server."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("fastapi")

import arthex
from arthex.adapters.local import LocalBackend
from arthex.core.trajectories import Trajectory, TrajectoryGroup
from arthex.rewards import JudgeError, JudgeUsage, ruler_score_group
from arthex.testing.builders import make_choice
from arthex.testing.tiny_model import tiny_model

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_a_tiny_judge_on_arthex_server_fails_honestly(tmp_path: Path) -> None:
    group = TrajectoryGroup(
        [
            Trajectory(messages_and_choices=[{"role": "user", "content": "2+2?"}, make_choice(a)])
            for a in ("4", "5")
        ]
    )

    async def main() -> tuple[JudgeUsage, JudgeUsage, BaseException | None]:
        backend = LocalBackend(str(tmp_path / "art"))
        judge = arthex.TrainableModel(
            name="judge", project="rewards", base_model=tiny_model(tmp_path / "tiny"),
            base_path=str(tmp_path / "art"), report_metrics=[],
        )  # fmt: skip
        raised: BaseException | None = None
        strict, lenient = JudgeUsage(), JudgeUsage()
        try:
            await judge.register(backend)
            name, client = judge.get_inference_name(), judge.openai_client()
            params = {"max_tokens": 24, "temperature": 0.0}
            try:
                await ruler_score_group(
                    group, name, params, client=client, cache=None, usage=strict
                )
            except JudgeError as error:
                raised = error
            skipped = await ruler_score_group(
                group, name, params, client=client, cache=None, usage=lenient,
                swallow_exceptions=True,
            )  # fmt: skip
            assert skipped is None
        finally:
            await judge.close()
            await backend.close()
        return strict, lenient, raised

    strict, lenient, raised = asyncio.run(main())
    assert isinstance(raised, JudgeError) and "after 2 attempts" in str(raised)
    for usage in (strict, lenient):
        assert usage.calls == 2 and usage.failures == 1
        assert usage.prompt_tokens > 0 and 0 < usage.completion_tokens <= 2 * 24
    # Greedy decoding of the same prompts: the swallowed run cost exactly what the first did.
    assert (lenient.prompt_tokens, lenient.completion_tokens) == (
        strict.prompt_tokens,
        strict.completion_tokens,
    )
