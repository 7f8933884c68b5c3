"""The retention use case (`core.pruning.delete_checkpoints`) over a run directory's own
checkpoints (`RunCheckpoints`, what `arthex prune` opens), and prune's hold on the run's
lease as another process sees it. Real folders in tmp_path; the expected keep and delete sets
are worked out by hand from the rule (the latest, the last k, the best, the pinned)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from arthex.adapters.local.checkpoints import RunCheckpoints
from arthex.apps.cli import prune as prune_cli
from arthex.core.errors import InvalidInputError
from arthex.core.identity import RunRef
from arthex.core.pruning import delete_checkpoints
from arthex.ports.training_backend import CheckpointFiles

RUN = RunRef(project="proj", name="agent")


def run_dir(base: Path, complete: list[int], incomplete: tuple[int, ...] = ()) -> Path:
    model = base / "proj" / "models" / "agent"
    for step in complete:
        folder = model / "checkpoints" / f"{step:04d}"
        folder.mkdir(parents=True)
        (folder / "trainer_state.json").write_text(json.dumps({"format": 1, "step": step}))
    for step in incomplete:
        (model / "checkpoints" / f"{step:04d}").mkdir(parents=True)
    return model


def folders(model: Path) -> list[str]:
    return sorted(p.name for p in (model / "checkpoints").iterdir())


def test_a_dry_run_says_what_goes_and_deleting_removes_just_that(tmp_path: Path) -> None:
    model = run_dir(tmp_path, [0, 1, 2, 3, 4, 5], incomplete=(6,))
    files: CheckpointFiles = RunCheckpoints(model, RUN)

    async def decide(dry_run: bool) -> tuple[tuple[int, ...], tuple[int, ...]]:
        decision = await delete_checkpoints(
            files, RUN, 1, metric="val/reward", keep_last=2, pinned=[3], dry_run=dry_run
        )
        assert decision.best_step == 1 and decision.dry_run is dry_run
        return decision.kept, decision.deleted

    # keep: latest 5, last two (4, 5), best 1, pinned 3; the rest of the checkpoints go
    assert asyncio.run(decide(True)) == ((1, 3, 4, 5), (0, 2))
    assert folders(model) == ["0000", "0001", "0002", "0003", "0004", "0005", "0006"]
    # deleting also takes the incomplete folder, as the LocalBackend's deletion does
    assert asyncio.run(decide(False)) == ((1, 3, 4, 5), (0, 2, 6))
    assert folders(model) == ["0001", "0003", "0004", "0005"]


def test_an_unlogged_metric_keeps_every_checkpoint(tmp_path: Path) -> None:
    model = run_dir(tmp_path, [0, 1, 2])
    decision = asyncio.run(
        delete_checkpoints(RunCheckpoints(model, RUN), RUN, None, metric="val/rewrd")
    )
    assert (decision.best_step, decision.kept, decision.deleted) == (None, (0, 1, 2), ())
    assert "'val/rewrd' was never logged for proj/agent" in decision.reason
    assert folders(model) == ["0000", "0001", "0002"]


def test_a_run_directorys_checkpoints_serve_only_their_run(tmp_path: Path) -> None:
    files = RunCheckpoints(run_dir(tmp_path, [0]), RUN)
    with pytest.raises(InvalidInputError, match="checkpoints of proj/agent, not of proj/other"):
        asyncio.run(files.get_step(RunRef(project="proj", name="other")))


TRAINER = """
import sys
from arthex.adapters.run_files.lease import FileRunLeases
from arthex.core.errors import RunBusyError
from arthex.core.identity import RunRef
try:
    FileRunLeases(sys.argv[1]).acquire_now(RunRef(project="proj", name="agent"))
except RunBusyError as error:
    print(error)
else:
    print("taken")
"""


def test_a_trainer_starting_while_prune_deletes_is_refused_naming_prune(tmp_path: Path) -> None:
    run_dir(tmp_path, [0, 1])

    def trainer() -> str:
        return subprocess.run(
            [sys.executable, "-c", TRAINER, str(tmp_path)],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        ).stdout

    async def main() -> None:
        async with prune_cli._lease(tmp_path, RUN):
            refused = await asyncio.to_thread(trainer)
            assert "registered at arthex prune" in refused and "one trainer per run" in refused
        assert await asyncio.to_thread(trainer) == "taken\n"  # given back when prune is done

    asyncio.run(main())
