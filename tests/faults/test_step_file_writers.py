"""Many processes writing one step file, and a writer killed at every point of a rewrite.

Every writer here is a real process. Killed writers die by SIGKILL (no cleanup runs), at a
point chosen by patching, inside the child only, the call that marks it."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from arthex.adapters.parquet.store import ParquetTrajectoryStore
from arthex.core.identity import RunRef
from arthex.core.trajectories import TrajectoryGroup
from arthex.testing.builders import make_group
from tests._parts import write_legacy_part

pytestmark = pytest.mark.faults

RUN = RunRef("proj", "run-1")


def read(root: Path, step: int = 0) -> list[TrajectoryGroup]:
    return asyncio.run(ParquetTrajectoryStore(str(root)).read(RUN, "train", step))


def write(root: Path, tag: object, step: int = 0) -> None:
    group = make_group([0.0, 1.0], metadata={"n": str(tag)})
    asyncio.run(ParquetTrajectoryStore(str(root)).write(RUN, "train", step, [group]))


def tags(groups: list[TrajectoryGroup]) -> list[object]:
    return [g.metadata["n"] for g in groups]


def split_dir(root: Path) -> Path:
    return root / "proj" / "models" / "run-1" / "trajectories" / "train"


def _writer(root: str, who: str, count: int, barrier: multiprocessing.synchronize.Barrier) -> None:
    store = ParquetTrajectoryStore(root)
    barrier.wait()
    for n in range(count):
        group = make_group([0.0, 1.0], metadata={"who": who, "n": n})
        asyncio.run(store.write(RUN, "train", 0, [group]))


@pytest.mark.slow
def test_writers_in_many_processes_are_serialized_and_nothing_is_lost(tmp_path: Path) -> None:
    writers, count = 4, 6
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(writers)
    processes = [
        context.Process(target=_writer, args=(str(tmp_path), f"w{w}", count, barrier))
        for w in range(writers)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=300)
    assert [p.exitcode for p in processes] == [0] * writers
    back = [(g.metadata["who"], g.metadata["n"]) for g in read(tmp_path)]
    assert sorted(back) == sorted((f"w{w}", n) for w in range(writers) for n in range(count))
    for w in range(writers):  # each writer's groups in its own order
        assert [n for who, n in back if who == f"w{w}"] == list(range(count))
    assert sorted(os.listdir(split_dir(tmp_path))) == [".lock", "0000.parquet"]
    indexes = pq.read_table(split_dir(tmp_path) / "0000.parquet").column("group_index")
    assert sorted(set(indexes.to_pylist())) == list(range(writers * count))


# --- a writer killed mid-rewrite ----------------------------------------------------------------

_KILLER = textwrap.dedent(
    """
    import asyncio, os, re, signal, sys
    import pyarrow.parquet as pq
    from arthex.adapters.parquet import local_disk
    from arthex.adapters.parquet.store import ParquetTrajectoryStore
    from arthex.core.identity import RunRef
    from arthex.testing.builders import make_group

    root, point = sys.argv[1], sys.argv[2]

    def die():
        os.kill(os.getpid(), signal.SIGKILL)

    def counting(original, kill_at, after=False, only=lambda *a: True):
        calls = [0]
        def wrapper(*args, **kwargs):
            if not only(*args):
                return original(*args, **kwargs)
            calls[0] += 1
            if calls[0] == kill_at and not after:
                die()
            result = original(*args, **kwargs)
            if calls[0] == kill_at and after:
                die()
            return result
        return wrapper

    step_file = lambda src, dst: str(dst).endswith("0000.parquet")
    legacy = lambda path: re.fullmatch(r"[0-9]{4}-[0-9]+[.]parquet", os.path.basename(str(path)))
    if point == "encoding the new groups":
        local_disk.write_part = counting(local_disk.write_part, 1)
    elif point == "holding the lock, before the merge":
        local_disk.merge = counting(local_disk.merge, 1)
    elif point == "halfway through the merged file":
        pq.ParquetWriter.write_table = counting(pq.ParquetWriter.write_table, 2)
    elif point == "before the rename":
        os.replace = counting(os.replace, 1, only=step_file)
    elif point == "after the rename":
        os.replace = counting(os.replace, 1, after=True, only=step_file)
    elif point == "before the directory fsync":
        local_disk.fsync_dir = counting(local_disk.fsync_dir, 1)
    elif point == "after deleting one folded part":
        os.unlink = counting(os.unlink, 1, after=True, only=legacy)
    else:
        raise SystemExit(f"unknown point {point}")
    group = make_group([0.0, 1.0], metadata={"n": "new"})
    asyncio.run(ParquetTrajectoryStore(root).write(RunRef("proj", "run-1"), "train", 0, [group]))
    raise SystemExit("the writer was not killed")
    """
)

# Where the writer dies, and whether its groups are in the step file afterwards.
POINTS = {
    "encoding the new groups": False,
    "holding the lock, before the merge": False,
    "halfway through the merged file": False,
    "before the rename": False,
    "after the rename": True,
    "before the directory fsync": True,
}


def _kill_writer(root: Path, point: str) -> None:
    killed = subprocess.run(
        [sys.executable, "-c", _KILLER, str(root), point], capture_output=True, timeout=120
    )
    assert killed.returncode == -9, killed.stderr.decode()[-2000:]


@pytest.mark.parametrize("point", sorted(POINTS))
def test_a_writer_killed_mid_rewrite_loses_nothing_already_written(
    tmp_path: Path, point: str
) -> None:
    write(tmp_path, "old-1")
    write(tmp_path, "old-2")
    _kill_writer(tmp_path, point)
    expected = ["old-1", "old-2", *(["new"] if POINTS[point] else [])]
    assert tags(read(tmp_path)) == expected
    write(tmp_path, "after")  # the dead writer's lock is free; its leftovers are harmless
    assert tags(read(tmp_path)) == [*expected, "after"]
    published = [n for n in os.listdir(split_dir(tmp_path)) if not n.startswith(".")]
    assert published == ["0000.parquet"]


@pytest.mark.parametrize("point", ["after the rename", "after deleting one folded part"])
def test_a_writer_killed_while_folding_legacy_parts_never_doubles_them(
    tmp_path: Path, point: str
) -> None:
    write(tmp_path, "old")
    for part in (1, 2):
        write_legacy_part(
            split_dir(tmp_path), 0, part, [make_group([0.5], metadata={"n": f"legacy-{part}"})]
        )
    _kill_writer(tmp_path, point)
    left = sorted(n for n in os.listdir(split_dir(tmp_path)) if n.endswith(".parquet"))
    assert left != ["0000.parquet"]  # the writer died before deleting every folded part
    expected = ["old", "legacy-1", "legacy-2", "new"]
    assert tags(read(tmp_path)) == expected
    write(tmp_path, "after")
    assert tags(read(tmp_path)) == [*expected, "after"]
    assert sorted(n for n in os.listdir(split_dir(tmp_path)) if n.endswith(".parquet")) == [
        "0000.parquet"
    ]
