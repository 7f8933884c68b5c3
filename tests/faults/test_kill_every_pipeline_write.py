"""A SIGKILL before each file-system write of one pipeline update, then the same script again.

The sweep of test_kill_every_write.py on the pipeline trainer (`_pipeline_loop`: LocalBackend,
the tiny model, batches of 2 scenarios): a run trained to step 1 over the stream's first two
scenarios, then a counting child that resumes it over four and makes update 2, numbering its N
writes under the base path (`_write_points`): the lease, the pipeline record (its intent
saved before the update, its step after it), the batch's train-split part and rows, the
checkpoint, the pipeline row. The full sweep counts them twice first: the same writes in the
same order (temp names aside), or a point would not name one write. For a point K, a copy of the
step-1 run is resumed by a child that kills itself just before its K-th write, and a third child
resumes that over six scenarios and trains to step 3. After it:

- the killed child held no lease any more; the resumed one held it once registered (it took
  it over) and released it at exit;
- the resumed child stood at the newest complete checkpoint the kill left, with its exact
  weights and optimizer tensors;
- only complete checkpoint folders, no temp entry; the optimizer's step counter is 3;
- history against trajectories against the record (`check_run_files`): each of the six
  scenarios trained exactly once (its group in the train split at one step) or discarded,
  the train split's steps 0..2, one training row and one pipeline row per step 1..3, the
  history's discard counts equal to the record's, nothing pending or in flight;
- every history line whole; a torn one moved to `history.jsonl.torn`.

Each history append of the update is also killed halfway through its bytes. CI tries two
points (the record's intent saved, the checkpoint not published; the checkpoint published,
the record not yet at its step); `make soak` tries every one, and the torn appends.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("fastapi")

from safetensors.torch import load_file

from arthex.adapters.local import checkpoints as ckpt
from arthex.adapters.run_files.lease import lease_state
from arthex.adapters.run_files.pipeline import JsonPipelineStateStore
from arthex.testing.tiny_model import tiny_model
from tests._pipeline_checks import check_run_files

from ._pipeline_loop import BATCH, BOUND, PRELOAD, model_dir
from .test_kill_every_write import run_child, sweep
from .test_kill_resume import Attempt
from .test_pipeline_kill import RUN, check_no_repeats, check_resumed_weights
from .test_pipeline_kill import Attempt as PipelineAttempt

pytestmark = [pytest.mark.faults, pytest.mark.slow]

SWEPT_STEP = 2
FINAL_STEP = 3
RECORD = "pipeline_state.json"
HISTORY = "history.jsonl"
Ops = list[dict[str, Any]]


def lease_path(base: Path) -> Path:
    return model_dir(base) / "trainer.lease"


def pipeline_child(base: Path, base_model: str, dump: Path, steps: int, **options: Any) -> Attempt:
    """A pipeline child over the stream's first `steps` batches of scenarios."""
    return run_child(
        base,
        base_model,
        dump,
        lease=lease_path(base),
        preload=PRELOAD,
        pipeline=True,
        scenarios=steps * BATCH,
        **options,
    )


def shape_of(op: dict[str, Any]) -> tuple[str, str]:
    """A write with the random parts of its temp names (pid, token) left out."""
    return op["op"], re.sub(r"[0-9a-f]{6,}|\.\d+\.", "*", op["path"])


def writes_of(root: Path, base: Path, base_model: str, dump: Path, name: str) -> Ops:
    counted = root / name
    shutil.copytree(base, counted)
    counting = pipeline_child(counted, base_model, dump, SWEPT_STEP, count=True)
    assert counting.exitcode == 0, counting.events[-3:]
    ops = [e for e in counting.events if e["event"] == "op"]
    assert [e["n"] for e in ops] == list(range(1, len(ops) + 1)) and ops
    return ops


@pytest.fixture(scope="module")
def step_one(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, Ops]:
    """The pipeline run at step 1, its base model, and the writes that update 2 makes."""
    root = tmp_path_factory.mktemp("every-pipeline-write")
    base_model = tiny_model(root / "tiny")
    base, dump = root / "step-one", root / "dump"
    dump.mkdir()
    first = pipeline_child(base, base_model, dump, 1)
    assert first.exitcode == 0, first.events[-3:]
    ops = writes_of(root, base, base_model, dump, "counted")
    assert any(RECORD in e["path"] for e in ops), f"no write of the pipeline record: {ops}"
    return base, base_model, ops


def kill_and_resume(
    step_one: tuple[Path, str, Ops], point: int, where: Path, tear: bool = False
) -> str:
    base_at_one, base_model, _ops = step_one
    base, dump = where / "runs", where / "dump"
    shutil.copytree(base_at_one, base)
    dump.mkdir(parents=True)

    killed = pipeline_child(base, base_model, dump, SWEPT_STEP, kill_op=point, tear=tear)
    assert killed.exitcode == -signal.SIGKILL, (point, killed.exitcode, killed.events[-3:])
    said = next(e for e in killed.events if e["event"] == "self-kill")
    assert said["n"] == point and said["torn"] == tear, said
    assert lease_state(lease_path(base))[0] in ("stale", "free"), "a dead child holds the lease"
    latest = ckpt.complete_steps(model_dir(base))[-1]
    assert latest in (1, SWEPT_STEP), f"kill before {said} left latest step {latest}"
    record = asyncio.run(JsonPipelineStateStore(str(base)).load(RUN))
    assert record is not None and record.step in (1, SWEPT_STEP), record

    resumed = pipeline_child(base, base_model, dump, FINAL_STEP)
    assert resumed.exitcode == 0, (said, resumed.exitcode, resumed.events[-3:])
    attempt = PipelineAttempt(resumed.events, resumed.exitcode, str(said))
    registered = attempt.first("registered")
    assert registered is not None and registered["step"] == latest, (registered, latest)
    check_resumed_weights(base, dump, attempt, "resume")
    check_resumed_weights(base, dump, attempt, "final")
    done = attempt.first("done")
    assert done is not None and done["step"] == FINAL_STEP, resumed.events[-3:]
    check_run(base)
    assert (model_dir(base) / f"{HISTORY}.torn").exists() == tear
    torn = " (torn)" if tear else ""
    return f"{point}{torn}: {said['op']} {said['path']} -> resumed at {latest}"


def check_run(base: Path) -> None:
    assert lease_state(lease_path(base))[0] == "free", "the resumed run kept its lease"
    mdir = model_dir(base)
    folders, complete = ckpt.step_folders(mdir), ckpt.complete_steps(mdir)
    assert folders == complete and complete[-1] == FINAL_STEP, (folders, complete)
    entries = [p.name for p in ckpt.checkpoints_dir(mdir).iterdir()]
    assert not [e for e in entries if e.startswith(".")], f"temp entries left: {entries}"
    optimizer = load_file(str(ckpt.step_dir(mdir, FINAL_STEP) / ckpt.OPTIMIZER_FILE))
    counters = {float(v) for k, v in optimizer.items() if k.endswith(".step")}
    assert counters == {float(FINAL_STEP)}, f"AdamW took {counters} steps for {FINAL_STEP}"
    for line in (mdir / HISTORY).read_bytes().splitlines():
        json.loads(line)  # every line whole: a torn one was moved aside
    check_no_repeats(base)
    asyncio.run(
        check_run_files(base, RUN, steps=FINAL_STEP, scenarios=FINAL_STEP * BATCH, bound=BOUND)
    )


def ci_points(ops: Ops) -> dict[str, int]:
    """The two points CI tries, found by what the write is: around the update's checkpoint,
    where the record and the backend's step disagree."""
    records = [e["n"] for e in ops if e["op"] == "os.rename" and RECORD in e["path"]]
    publish = [e["n"] for e in ops if e["op"] == "os.rename" and "checkpoints/.tmp-" in e["path"]]
    assert records and publish, f"no record save or checkpoint publish among the writes: {ops}"
    intent = max(n for n in records if n < publish[0])
    after = min(n for n in records if n > publish[0])
    return {
        "record's intent saved, checkpoint not published": intent + 1,
        "checkpoint published, record not at its step": after,
    }


def appends(ops: Ops) -> list[int]:
    return [int(e["n"]) for e in ops if e["op"] == "os.write" and e["path"].endswith(HISTORY)]


def test_a_kill_around_a_pipeline_checkpoint_loses_nothing(
    step_one: tuple[Path, str, Ops], tmp_path: Path
) -> None:
    ops = step_one[2]
    done = [
        f"{what}: " + kill_and_resume(step_one, p, tmp_path / f"k{p}")
        for what, p in ci_points(ops).items()
    ]
    print("\n".join([f"{len(ops)} writes:", *map(str, ops), *done]))  # shown with -s


@pytest.mark.soak
def test_a_kill_before_every_pipeline_write_loses_nothing(
    step_one: tuple[Path, str, Ops], tmp_path: Path
) -> None:
    base, base_model, ops = step_one
    dump = tmp_path / "dump"
    dump.mkdir()
    again = writes_of(tmp_path, base, base_model, dump, "counted-again")
    shape, shape_again = [shape_of(e) for e in ops], [shape_of(e) for e in again]
    assert shape == shape_again, f"the update's writes vary by run:\n{shape}\n{shape_again}"
    sweep(
        ops,
        appends(ops),
        lambda point, where, tear: kill_and_resume(step_one, point, where, tear),
        tmp_path,
    )
