"""A `train` call whose update trains nothing (every group's rewards tie, or no token is
trainable) says so in the library's log, once per run of such steps: a loop that prints only
`loss` learns why the weights did not move, without the CLI or the history."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

import arthex
from arthex.testing.builders import synthetic_groups
from arthex.testing.fakes.backend import InMemoryBackend

# step -> does its batch have spread? (the worked example: two runs of tied steps)
SPREAD = [False, False, False, True, False, True]


def test_a_run_of_steps_that_train_nothing_is_said_once_at_its_first_step(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> list[float | None]:
        model = arthex.TrainableModel(
            name="m", project="p", base_model="tiny", base_path=str(tmp_path), report_metrics=[]
        )
        await model.register(InMemoryBackend())
        taken = []
        for step, spread in enumerate(SPREAD):
            groups = synthetic_groups(equal=not spread, offset=step)
            result = await model.train(groups, config={"learning_rate": 1e-2})
            taken.append(result.metrics["data/step_num_gradient_steps"])
        await model.close()
        return taken

    with caplog.at_level(logging.WARNING, logger="arthex"):
        taken = asyncio.run(main())
    # the backend's own word on each update: nothing trained exactly where the batch tied
    assert [t == 0 for t in taken] == [not spread for spread in SPREAD]
    said = [r.getMessage() for r in caplog.records if "trained nothing" in r.getMessage()]
    assert said == [
        "p/m: step 0 -> 1 trained nothing: the rewards of each of its 2 groups were all equal, "
        "so every advantage was 0; the step advanced, the weights did not (the next updates "
        "like it are not reported until one trains)",
        "p/m: step 4 -> 5 trained nothing: the rewards of each of its 2 groups were all equal, "
        "so every advantage was 0; the step advanced, the weights did not (the next updates "
        "like it are not reported until one trains)",
    ]


def test_a_run_that_expects_equal_rewards_is_not_warned_of_its_tied_steps(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The demo's task is made to be solved (its groups then tie): a caller that said so with
    run_diagnostics.expect("equal_rewards") gets no line for it; other runs still do."""

    async def main() -> None:
        model = arthex.TrainableModel(
            name="m", project="p", base_model="tiny", base_path=str(tmp_path), report_metrics=[]
        )
        model.run_diagnostics.expect("equal_rewards")
        await model.register(InMemoryBackend())
        for step, spread in enumerate(SPREAD):
            groups = synthetic_groups(equal=not spread, offset=step)
            await model.train(groups, config={"learning_rate": 1e-2})
        await model.close()

    with caplog.at_level(logging.WARNING, logger="arthex"):
        asyncio.run(main())
    assert [r.getMessage() for r in caplog.records if "trained nothing" in r.getMessage()] == []
