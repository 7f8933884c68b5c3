"""arthex and ART 0.5.23 read each other's runs, checked with ART's own code (see conftest.py
for the world both sides write, in its order). ART's results are the oracle for what ART sees;
arthex's inputs are the oracle for what arthex wrote."""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ._compare import canonical, first_difference
from ._groups import dumped
from .conftest import RETENTION_REWARDS, World

pytestmark = pytest.mark.interop

KOLKATA = timedelta(hours=5, minutes=30)
# Keys both sides must write with the same value for the same logged batch; everything else
# both write is compared too, so the check tightens as the key names converge.
MUST_SHARE = {"step", "training_step", "{split}/reward", "{split}/reward_std_dev",
              "{split}/exception_rate"}  # fmt: skip


def expected_step_files(world: World) -> dict[str, list[dict[str, Any]]]:
    """What arthex logged at each (split, step), in logging order: the oracle."""
    expected: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for batch in world.batches:
        expected[f"{batch.split}/{batch.step:04d}.parquet"] += dumped(batch.groups)
    return dict(expected)


def history(model_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (model_dir / "history.jsonl").read_text().splitlines()]


# --- arthex writes, ART reads -------------------------------------------------------------------


def test_art_reads_every_group_arthex_logged_at_each_step(world: World) -> None:
    expected = expected_step_files(world)
    assert set(world.art["step_files"]) == set(expected)
    for name, groups in expected.items():
        art, ours = canonical(world.art["step_files"][name]), canonical(groups)
        assert art == ours, f"{name}: {first_difference(art, ours)}"
    # the second log at val step 0 is in the one file ART reads, after the first
    assert [g["metadata"]["scenario_id"] for g in world.art["step_files"]["val/0000.parquet"]] == [
        "weather", "down", "docs", "sums",
    ]  # fmt: skip
    for split in ("train", "val"):
        directory = world.model_dir("interop", "agent") / "trajectories" / split
        assert not [p.name for p in directory.iterdir() if "-" in p.name]  # no extra parts


def test_art_loaders_see_every_trajectory_with_its_metrics(world: World) -> None:
    rows = [r for r in world.art["trajectories"] if r["model"] == "agent"]
    got: dict[tuple[str, int], list[float]] = defaultdict(list)
    for row in rows:
        got[(row["split"], row["step"])].append(row["reward"])
    want: dict[tuple[str, int], list[float]] = defaultdict(list)
    for batch in world.batches:
        for group in batch.groups:
            want[(batch.split, batch.step)] += [t.reward for t in group.trajectories]
    assert dict(got) == dict(want)
    tools = [r for r in rows if r["split"] == "val" and r["step"] == 0 and r["metric_turns"]]
    assert len(tools) == 2 and [r["metric_acc"] for r in tools] == [0.0, 1.0]
    assert any(m.get("tool_calls") for m in tools[0]["messages"])


def test_art_aggregates_arthex_metrics_and_history_times(world: World) -> None:
    arthex_rows = history(world.model_dir("interop", "agent"))
    first_time: dict[int, str] = {}
    for row in arthex_rows:
        first_time.setdefault(row["step"], row["recorded_at"])
    aggregated = {
        (r["split"], r["step"]): r for r in world.art["aggregated"] if r["model"] == "agent"
    }
    assert set(aggregated) == {(b.split, b.step) for b in world.batches}
    for (split, step), row in aggregated.items():
        assert row["recorded_at"] == first_time[step]
        assert datetime.fromisoformat(row["recorded_at"]).utcoffset() == timedelta(0)
        # ART's aggregate: the mean over groups of each group's mean (over trajectories that
        # have the metric); computed here from what was logged
        means = []
        for batch in world.batches:
            if (batch.split, batch.step) != (split, step):
                continue
            for group in batch.groups:
                values = [float(t.metrics["acc"]) for t in group.trajectories if "acc" in t.metrics]
                if values:
                    means.append(statistics.mean(values))
        if means:
            assert row["metric_acc"] == pytest.approx(statistics.mean(means))
        else:
            assert row.get("metric_acc") is None


def test_model_log_writes_the_history_art_writes_for_the_same_batches(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    ours = history(world.model_dir("parity", "arthex"))
    theirs = world.art["parity_history"]
    assert len(ours) == len(theirs) == len(world.batches)
    only_ours: set[str] = set()
    only_art: set[str] = set()
    for batch, mine, art in zip(world.batches, ours, theirs, strict=True):
        shared = (set(mine) & set(art)) - {"recorded_at"}
        only_ours |= set(mine) - set(art)
        only_art |= set(art) - set(mine)
        must = {key.format(split=batch.split) for key in MUST_SHARE}
        if any("acc" in t.metrics for g in batch.groups for t in g.trajectories):
            must.add(f"{batch.split}/acc")  # a trajectory metric, averaged by both
        assert must <= shared, (batch.split, batch.step, sorted(shared))
        for key in sorted(shared):
            a, b = mine[key], art[key]
            assert a == pytest.approx(b) or (
                a is None and isinstance(b, float) and math.isnan(b)
            ), f"{batch.split} step {batch.step}: {key} is {a} in arthex, {b} in ART"
    with capsys.disabled():
        print(f"\nhistory keys only arthex writes: {sorted(only_ours)}")
        print(f"history keys only ART writes: {sorted(only_art)}")


def test_delete_checkpoints_decides_as_art_does(world: World) -> None:
    best = max(range(len(RETENTION_REWARDS)), key=RETENTION_REWARDS.__getitem__)
    latest = len(RETENTION_REWARDS) - 1
    expected = [f"{best:04d}", f"{latest:04d}"]
    assert world.art["retention"] == {"kept": sorted({best, latest}), "left": expected}
    pruned = world.arthex["cli"]["prune_arthex"]
    assert pruned.returncode == 0, pruned.stderr
    folders = world.model_dir("retention", "by-arthex") / "checkpoints"
    assert sorted(p.name for p in folders.iterdir()) == expected


# --- ART writes, arthex reads -------------------------------------------------------------------


def test_arthex_reads_every_group_art_wrote(world: World) -> None:
    files = world.art["run"]["files"]
    assert {name.removeprefix("trajectories/") for name in files} == set(world.arthex["read"])
    for name, groups in files.items():
        ours, art = (
            canonical(world.arthex["read"][name.removeprefix("trajectories/")]),
            canonical(groups),
        )
        assert ours == art, f"{name}: {first_difference(ours, art)}"
    rows = world.arthex["frame"]
    for name, groups in files.items():
        split, step = name.split("/")[1], int(name.split("/")[2][:4])
        expected = [
            t.get("reward", 0.0) if t else None
            for g in groups
            for t in g.get("trajectories") or [None]
        ]
        assert [r for s, st, _, r in rows if (s, st) == (split, step)] == [
            r if r is None else pytest.approx(r) for r in expected
        ]


def test_arthex_reads_art_history_times_in_the_zone_art_wrote_them(world: World) -> None:
    naive = [row["recorded_at"] for row in world.art["run"]["history"]]
    assert all(datetime.fromisoformat(text).tzinfo is None for text in naive)
    expected = [(datetime.fromisoformat(text) - KOLKATA).isoformat() + "+00:00" for text in naive]
    assert world.arthex["history_utc"] == expected


def test_arthex_cli_shows_the_art_run(world: World) -> None:
    cli = world.arthex["cli"]
    for name, result in cli.items():
        assert result.returncode == 0, (name, result.stderr)
    val_zero = world.art["run"]["files"]["trajectories/val/0000.parquet"]
    shown = cli["trajectories"].stdout
    assert f"groups={len(val_zero)}" in shown
    assert "get_weather" in shown and "sunny" in shown and "model down" in shown
    art_history = world.art["run"]["history"]
    val_rows = [row for row in art_history if "val/reward" in row]
    history_text = cli["history"].stdout
    # one row per step, unless ART evaluated a step twice (then a row per step and split)
    one_each = len({row["step"] for row in val_rows}) == len(val_rows)
    unit = "steps" if one_each else "rows (one per step and split)"
    assert f"all {len(val_rows)} {unit}" in history_text
    for row in val_rows:  # ART's local times, shown as ART wrote them (same zone)
        assert row["recorded_at"].replace("T", " ")[:19] in history_text
    runs = [line for line in cli["runs"].stdout.splitlines() if "agent-run" in line]
    assert len(runs) == 1
    means = defaultdict(list)
    for row in val_rows:
        means[row["step"]].append(row["val/reward"])
    best = max(means, key=lambda step: statistics.mean(means[step]))
    assert f"val/reward {statistics.mean(means[best]):.4g} @ {best}" in runs[0]
    newest = max(datetime.fromisoformat(row["recorded_at"]) for row in art_history)
    assert newest.strftime("%Y-%m-%d %H:%M") in runs[0]
    prune = cli["prune"].stdout
    doomed = sorted({0, 1, 2} - {best, 2})
    assert f"would delete {len(doomed)} checkpoint(s)" in prune
    assert ", ".join(str(s) for s in doomed) in prune


def test_trainable_model_continues_the_art_run_and_art_sees_it(world: World) -> None:
    assert "continue_error" not in world.arthex, world.arthex.get("continue_error")
    continued = world.arthex["continued"]
    assert continued["registered_at"] == 2
    assert continued["step"] == 4
    assert {"agent-run@3", "agent-run@4"} <= set(continued["served"])
    assert continued["inference_name"] == "agent-run@4"
    assert continued["art_folders_unchanged"]
    assert world.art["continued_step"] == 4
    # ART's step file at train step 2 now also holds arthex's groups, after ART's own
    original = world.art["run"]["files"]["trajectories/train/0002.parquet"]
    step_file = world.art["continued_step_file"]
    assert len(step_file) == len(original) + 2
    assert canonical(step_file[: len(original)]) == canonical(original)
    steps = {(r["split"], r["step"]) for r in world.art["continued_trajectories"]}
    assert {("train", 2), ("train", 3)} <= steps
    aggregated = {(r["split"], r["step"]): r for r in world.art["continued_aggregated"]}
    assert aggregated[("train", 3)]["recorded_at"] is not None
