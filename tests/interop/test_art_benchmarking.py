"""ART 0.5.23's benchmarking loaders and arthex's under `arthex.art.utils.benchmarking` give
the same frames for one project that arthex wrote (art/benchmarking_script.py, one script for
both): `load_trajectories` (all models, one model, a missing project), `BenchmarkModelKey` and
`filter_rename_model_split`, `load_aggregated_trajectories` (with the history's timestamps,
and for one metric) and `load_latest_metrics` (val and train).

Group numbers are labels given in the order each loader walks the folders (ART walks them in
the file system's order, arthex in sorted order), so rows are compared with the group number
replaced by the set of rows that share it."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import arthex
from arthex.core.trajectories import Trajectory, TrajectoryGroup
from arthex.testing.builders import make_choice

from .art_env import SCRIPTS, art_environment, art_python

SCRIPT = "benchmarking_script"


def group(step: int, rewards: list[float], **shared: Any) -> TrajectoryGroup:
    return TrajectoryGroup(
        [
            Trajectory(
                messages_and_choices=[
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": f"question {step}-{i}"},
                    make_choice(None, tool_calls=[{"name": "look", "arguments": '{"q": 1}'}])
                    if i % 2
                    else make_choice(f"answer {i}"),
                ],
                reward=reward,
                metrics={"reward": reward, "correct": float(reward > 0.5), "turns": i + 1},
                metadata={"scenario": f"s{step}", "seed": i},
                logs=[f"log {i}"],
            )
            for i, reward in enumerate(rewards)
        ],
        **shared,
    )


async def write_project(base: Path) -> None:
    for name, offset in (("agent-a", 0.0), ("agent-b", 0.25)):
        model = arthex.Model(name=name, project="bench", base_path=str(base), report_metrics=[])
        for step in (1, 2):
            train = [
                group(step, [offset, 1.0], metadata={"task": "t"}, metrics={"difficulty": 2}),
                group(step, [0.5 + offset / 2, 0.0, 1.0]),
            ]
            await model.log(train, split="train", step=step)
            await model.log([group(step, [offset + step / 4])], split="val", step=step)
        # a second write at a step (its own rows), and a group whose every rollout failed
        await model.log([group(2, [0.75])], split="val", step=2)
        failed = TrajectoryGroup([], exceptions=[RuntimeError("rollout died")])
        await model.log([failed, group(3, [0.5])], split="val", step=3)


def canonical(rows: list[dict[str, Any]]) -> list[Any]:
    """The rows without their group numbers, each with the rows of its group beside it."""

    def text(row: dict[str, Any]) -> str:
        return json.dumps({k: v for k, v in row.items() if k != "group_number"}, sort_keys=True)

    members: dict[Any, list[str]] = {}
    for row in rows:
        members.setdefault(row.get("group_number"), []).append(text(row))
    return sorted((text(row), sorted(members[row.get("group_number")])) for row in rows)


def test_art_and_arthex_load_one_project_the_same(tmp_path: Path) -> None:
    base = tmp_path / "art"
    asyncio.run(write_project(base))
    cases = {
        "project": "bench",
        "art_path": str(base),
        "models": ["agent-b"],
        "keys": [["agent-a", "A", "train"], ["agent-b", None, None]],
    }
    scratch = tmp_path / "cwd"  # ART's loader makes data/cache.db's folder where it runs
    scratch.mkdir()
    done = subprocess.run(
        [str(art_python()), str(SCRIPTS / f"{SCRIPT}.py"), "art"],
        input=json.dumps(cases), capture_output=True, text=True, env=art_environment(),
        cwd=scratch, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    art = json.loads(done.stdout)
    sys.path.insert(0, str(SCRIPTS))
    try:
        from benchmarking_script import run  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(SCRIPTS))
    mine = json.loads(json.dumps(run("arthex.art", cases)))

    # what was written: 2 models x (train: 2 steps x 5 rows; val: 1, 1 + 1, 1 rows)
    assert len(art["rows"]) == 2 * (2 * 5 + 4)
    assert {row["split"] for row in art["rows"]} == {"train", "val"}
    for key in ("rows", "one_model", "filtered"):
        assert canonical(mine[key]) == canonical(art[key]), key
    for key in ("columns", "missing", "keys", "reward_only", "latest", "latest_train"):
        assert mine[key] == art[key], key
    # the step table, its history timestamps read by each library its own way
    assert [{**r, "recorded_at": None} for r in mine["steps"]] == [
        {**r, "recorded_at": None} for r in art["steps"]
    ]
    assert all(r["recorded_at"] for r in art["steps"] if r["split"] == "val")
