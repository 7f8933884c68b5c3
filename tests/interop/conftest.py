"""One world per session: arthex and ART (its own code, in its own venv) write and read each
other's runs, in this order, with ART running under a non-UTC time zone:

1. arthex logs the shared batches (`_groups.py`) into `interop/agent` (val step 0 twice), the
   same batches into `parity/arthex`, each batch alone into `inputs/batches` (ART's input),
   and a retention run into `retention/by-arthex` and `retention/by-art`.
2. ART, one process: reads arthex's step files and runs its loaders over `interop`, logs the
   same batches with its own `Model.log` into `parity/art`, decides retention on
   `retention/by-art` with `TrainableModel.delete_checkpoints`, and writes its own run
   `artrun/agent-run`.
3. arthex reads ART's run (store, loaders, the CLI under the same time zone), prunes
   `retention/by-arthex`, gives ART's run LoRA checkpoints as ART's LocalBackend leaves them,
   and continues it with a TrainableModel on LocalBackend for two steps.
4. ART, a second process: reads the continued run.

Two ART processes in all: importing `art` costs seconds each time.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest

import arthex
from arthex.adapters.parquet.store import ParquetTrajectoryStore
from arthex.core.identity import RunRef

from ._groups import Batch, batches
from .art_env import art_python, run_art

TZ = "Asia/Kolkata"  # UTC+05:30 all year: ART's naive times are 5.5 hours ahead of UTC
RETENTION_REWARDS = [0.1, 0.4, 0.9, 0.3, 0.2]  # val/reward per step: best 2, latest 4


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.interop)


@attrs.define
class World:
    root: Path
    art_path: Path
    batches: list[Batch]
    art: dict[str, Any] = attrs.field(factory=dict)  # ART's results, by name
    arthex: dict[str, Any] = attrs.field(factory=dict)  # arthex's results, by name

    def model_dir(self, project: str, name: str) -> Path:
        return self.art_path / project / "models" / name


def cli(*args: str, tz: str = TZ) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "TZ": tz, "COLUMNS": "250", "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "arthex.apps.cli", *args], capture_output=True, text=True,
        env=environment, timeout=300,
    )  # fmt: skip


def in_zone(script: str, *args: str, tz: str = TZ) -> Any:
    """Run arthex code in a subprocess under `tz`; it prints one JSON value."""
    done = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True,
        env={**os.environ, "TZ": tz}, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.fixture(scope="session")
def art_interpreter() -> Path:
    return art_python()


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    pytest.importorskip("peft")
    from arthex.testing.tiny_model import tiny_model

    return tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="session")
def world(tmp_path_factory: pytest.TempPathFactory, art_interpreter: Path, tiny: str) -> World:
    root = tmp_path_factory.mktemp("interop")
    world = World(root=root, art_path=root / ".art", batches=batches())
    asyncio.run(_arthex_writes(world))
    _art_reads_and_writes(world, art_interpreter, tiny)
    _arthex_reads(world, tiny)
    try:
        asyncio.run(_arthex_continues(world, tiny))
    except Exception as error:  # reported by the test of the continuation; the rest still run
        world.arthex["continue_error"] = f"{type(error).__name__}: {error}"
    else:
        _art_reads_continued(world, art_interpreter)
    return world


# --- 1. arthex writes ---------------------------------------------------------------------------


async def _arthex_writes(world: World) -> None:
    base = str(world.art_path)
    inputs = ParquetTrajectoryStore(base)
    world.arthex["inputs"] = []
    for i, batch in enumerate(world.batches):
        where = await inputs.write(RunRef("inputs", "batches"), "b", i, batch.groups)
        world.arthex["inputs"].append(where)
    for project, name in (("interop", "agent"), ("parity", "arthex")):
        async with arthex.Model(name=name, project=project, base_path=base, report_metrics=[]) as m:
            for batch in world.batches:
                await m.log(batch.groups, split=batch.split, step=batch.step)
    retention = arthex.Model(name="by-arthex", project="retention", base_path=base,
                             report_metrics=[])  # fmt: skip
    for step, reward in enumerate(RETENTION_REWARDS):
        await retention.log(metrics={"reward": reward}, split="val", step=step)
        await retention.log(metrics={"loss/train": 1.0 - reward}, split="train", step=step)
    await retention.close()
    source = world.model_dir("retention", "by-arthex")
    for step in range(len(RETENTION_REWARDS)):
        folder = source / "checkpoints" / f"{step:04d}"
        folder.mkdir(parents=True)
        (folder / "trainer_state.json").write_text(json.dumps({"format": 1, "step": step}))
        (folder / "adapter_model.safetensors").write_bytes(b"weights of step %d" % step)
    shutil.copytree(source, world.model_dir("retention", "by-art"))


# --- 2. ART reads arthex's runs and writes its own -------------------------------------------


def _art_reads_and_writes(world: World, python: Path, tiny: str) -> None:
    base = str(world.art_path)
    step_files = sorted((world.model_dir("interop", "agent") / "trajectories").glob("*/*.parquet"))
    tasks: list[dict[str, Any]] = [{"op": "read_parquet", "path": str(path)} for path in step_files]
    tasks += [
        {"op": "load_trajectories", "project": "interop", "art_path": base},
        {"op": "load_aggregated", "project": "interop", "art_path": base},
        {"op": "log", "project": "parity", "name": "art", "art_path": base,
         "batches": [{"source": source, "split": batch.split, "step": batch.step}
                     for source, batch in zip(world.arthex["inputs"], world.batches)]},
        {"op": "delete_checkpoints", "project": "retention", "name": "by-art", "art_path": base,
         "metric": "val/reward"},
        {"op": "write_native", "project": "artrun", "name": "agent", "run_name": "agent-run",
         "base_model": tiny, "art_path": base},
    ]  # fmt: skip
    results = run_art(python, tasks, world.root, TZ)
    n = len(step_files)
    world.art["step_files"] = {
        f"{path.parent.name}/{path.name}": groups for path, groups in zip(step_files, results[:n])
    }
    (world.art["trajectories"], world.art["aggregated"], world.art["parity_history"],
     world.art["retention"], world.art["run"]) = results[n:]  # fmt: skip


# --- 3. arthex reads ART's run, then continues it -----------------------------------------------


def _arthex_reads(world: World, tiny: str) -> None:
    from tests._art_run import write_art_adapters

    run_dir = Path(world.art["run"]["model_dir"])
    store = ParquetTrajectoryStore(str(world.art_path))
    run = RunRef("artrun", "agent-run")
    world.arthex["read"] = {
        f"{split}/{step:04d}.parquet": [
            g.model_dump(mode="json") for g in asyncio.run(store.read(run, split, step))
        ]
        for split in ("train", "val")
        for step in asyncio.run(store.steps(run, split))
    }
    frame = arthex.load_trajectories(run_dir).collect()
    world.arthex["frame"] = frame.select("split", "step", "part", "reward").rows()
    world.arthex["history_utc"] = in_zone(
        "import json, sys, arthex\n"
        "frame = arthex.load_history(sys.argv[1])\n"
        "print(json.dumps([v.isoformat() for v in frame['recorded_at'].to_list()]))\n",
        str(run_dir),
    )
    write_art_adapters(run_dir, tiny, steps=3)
    label = ["artrun/agent-run", "--base-path", str(world.art_path)]
    world.arthex["cli"] = {
        "trajectories": cli("trajectories", *label, "--split", "val", "--step", "0"),
        "history": cli("history", *label, "--keys", "val/reward,recorded_at", "--last", "100"),
        "runs": cli("runs", "--base-path", str(world.art_path)),
        "prune": cli("prune", *label, "--metric", "val/reward"),
        "prune_arthex": cli(
            "prune", "retention/by-arthex", "--base-path", str(world.art_path), "--yes"
        ),
    }


async def _arthex_continues(world: World, tiny: str) -> None:
    """arthex's TrainableModel on LocalBackend picks up ART's run (its name is ART's
    `run_name`, the run's folder) and trains it two steps with rollouts of its served model."""
    from arthex.adapters.local import LocalBackend
    from arthex.core.config import TrainConfig
    from tests._art_run import snapshot

    run_dir = Path(world.art["run"]["model_dir"])
    folders = sorted((run_dir / "checkpoints").iterdir())
    before = snapshot(folders)
    backend = LocalBackend()
    model = arthex.TrainableModel(
        name="agent-run", project="artrun", base_model=tiny, base_path=str(world.art_path),
        report_metrics=[],
    )  # fmt: skip
    out: dict[str, Any] = {}
    try:
        await model.register(backend)
        out["registered_at"] = await model.get_step()
        client = model.openai_client()
        for seed in (0, 1):
            groups = []
            for g in range(2):
                messages: list[Any] = [{"role": "user", "content": f"Count to {g + 3}."}]
                response = await client.chat.completions.create(
                    model=model.get_inference_name(), messages=messages, n=4, max_tokens=5,
                    logprobs=True, seed=10 * seed + g,
                )  # fmt: skip
                groups.append(
                    arthex.TrajectoryGroup(
                        arthex.Trajectory(messages_and_choices=[*messages, c], reward=i % 2)
                        for i, c in enumerate(response.choices)
                    )
                )
            await model.train(groups, config=TrainConfig(learning_rate=1e-2))
        out["step"] = await model.get_step()
        out["served"] = sorted([m.id async for m in await client.models.list()])
        out["inference_name"] = model.get_inference_name()
    finally:
        await model.close()
        await backend.close()
    out["art_folders_unchanged"] = snapshot(folders) == before
    world.arthex["continued"] = out


def _art_reads_continued(world: World, python: Path) -> None:
    run_dir = Path(world.art["run"]["model_dir"])
    base = str(world.art_path)
    tasks: list[dict[str, Any]] = [
        {"op": "get_step", "model_dir": str(run_dir)},
        {"op": "read_parquet", "path": str(run_dir / "trajectories" / "train" / "0002.parquet")},
        {"op": "load_trajectories", "project": "artrun", "art_path": base},
        {"op": "load_aggregated", "project": "artrun", "art_path": base},
    ]
    (world.art["continued_step"], world.art["continued_step_file"],
     world.art["continued_trajectories"], world.art["continued_aggregated"]) = run_art(
        python, tasks, world.root, TZ
    )  # fmt: skip
