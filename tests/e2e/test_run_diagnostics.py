"""In-run diagnostics against LocalBackend on the tiny model: the served step left behind (the
inference server not reloaded after an update) is called out from what the real server lists,
and the trainer ranks' stacks are collected for a hang report while training goes on."""

from __future__ import annotations

import asyncio
import logging
import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("fastapi")

import arthex
from arthex.adapters.local import LocalBackend
from arthex.core import diagnostics
from arthex.core.identity import ModelSpec, RunRef
from arthex.testing.builders import synthetic_groups
from arthex.testing.tiny_model import tiny_model

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def base_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    return tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def train_twice(
    base_model: str, root: Path, name: str, *, reload: bool
) -> tuple[list[float | None], list[str]]:
    """Two updates on LocalBackend; with `reload=False` its server is never pointed at the new
    steps (the fault planted: serving stays on step 0). Returns each training row's lag and
    the names the server lists at the end."""

    async def main() -> tuple[list[float | None], list[str]]:
        backend = LocalBackend(engine="torch", full_finetune=True)
        model = arthex.TrainableModel(
            name=name, project="diag", base_model=base_model, base_path=str(root), report_metrics=[]
        )
        try:
            await model.register(backend)
            if not reload:

                async def not_reloaded(*args: Any) -> None:
                    return None

                backend._serve = not_reloaded  # type: ignore[method-assign,assignment]
            lags = []
            for offset in (0, 1):
                result = await model.train(
                    synthetic_groups(2, 2, offset=offset), {"learning_rate": 1e-3}
                )
                lags.append(result.metrics.get(diagnostics.SERVED_LAG_KEY))
            listed = await model.openai_client().models.list()
            return lags, sorted(entry.id for entry in listed.data)
        finally:
            await model.close()
            await backend.close()

    return asyncio.run(main())


def test_the_served_step_left_behind_is_called_out_once(
    base_model: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="arthex"):
        lags, served = train_twice(base_model, tmp_path, "stale", reload=False)
    assert served == ["stale", "stale@0"]  # the oracle: what the server itself lists
    assert lags == [1.0, 2.0]
    said = [r.getMessage() for r in caplog.records if "does not serve" in r.getMessage()]
    assert len(said) == 1
    assert re.fullmatch(
        r"diag/stale: the inference server at http://127\.0\.0\.1:\d+/v1 does not serve step 1, "
        r"the step just trained \(newest served: 0\): rollouts sample an old policy; the server "
        r"was not reloaded \(restart it, or check the backend's serving errors\)",
        said[0],
    )


def test_a_server_that_follows_training_says_nothing(
    base_model: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="arthex"):
        lags, served = train_twice(base_model, tmp_path, "fresh", reload=True)
    assert {"fresh@1", "fresh@2"} <= set(served)
    assert lags == [0.0, 0.0]
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


@pytest.mark.slow
def test_the_ranks_stacks_are_collected_and_training_goes_on(
    base_model: str, tmp_path: Path
) -> None:
    run = RunRef("diag", "ranks")

    async def main() -> tuple[str | None, int]:
        backend = LocalBackend(full_finetune=True, world_size=2)
        try:
            await backend.register(
                ModelSpec(run=run, base_model=base_model, base_path=str(tmp_path))
            )
            async for _ in backend.train_steps(run, synthetic_groups(2, 2), arthex.TrainConfig()):
                pass
            # the watchdog asks from its own thread, never the event loop's
            stacks = await asyncio.to_thread(backend.rank_stacks, run)
            async for _ in backend.train_steps(run, synthetic_groups(2, 2), arthex.TrainConfig()):
                pass
            return stacks, await backend.get_step(run)
        finally:
            await backend.close()

    stacks, step = asyncio.run(main())
    assert step == 2  # the signalled ranks trained on
    assert stacks is not None
    for rank in (0, 1):
        section = stacks.split(f"-- rank {rank}, pid ")[1].split("-- rank ")[0]
        assert "most recent call first" in section  # faulthandler's dump of its threads
        assert "worker.py" in section
