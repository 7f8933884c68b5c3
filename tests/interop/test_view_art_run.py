"""`arthex view` on a run ART itself wrote (its own `TrainableModel.log`, in ART's venv, under
a non-UTC time zone): every endpoint answers from ART's files, checked against what ART's own
reader reads back from them."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests._view_runs import Viewer, snapshot, viewer

from .art_env import run_art
from .conftest import TZ

RUN = "/api/runs/artrun/agent-run"


@pytest.fixture(scope="module")
def art_run(
    tmp_path_factory: pytest.TempPathFactory, art_interpreter: Path, tiny: str
) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("art")
    base = root / ".art"
    task = {"op": "write_native", "project": "artrun", "name": "agent", "run_name": "agent-run",
            "base_model": tiny, "art_path": str(base)}  # fmt: skip
    results = run_art(art_interpreter, [task], root, TZ)
    result: dict[str, Any] = results[0]
    result["base"] = base
    return result


@pytest.fixture(scope="module")
def view(art_run: dict[str, Any]) -> Iterator[Viewer]:
    with viewer([str(art_run["base"])]) as running:
        yield running


def test_the_viewer_reads_every_endpoint_of_an_art_run(
    view: Viewer, art_run: dict[str, Any]
) -> None:
    before = snapshot(art_run["base"])
    history = art_run["history"]
    (run,) = view.json("/api/runs")["runs"]
    assert (run["project"], run["name"]) == ("artrun", "agent-run")
    assert run["errors"] == [] and run["checkpoints"] == 0
    assert run["step"] == max(row["step"] for row in history)
    means = defaultdict(list)
    for row in history:
        if "val/reward" in row:
            means[row["step"]].append(row["val/reward"])
    best = max(sorted(means), key=lambda step: statistics.mean(means[step]))
    assert run["best"]["step"] == best
    assert run["best"]["value"] == pytest.approx(statistics.mean(means[best]))
    rows = view.json(f"{RUN}/history")["rows"]
    assert [r["step"] for r in rows] == [r["step"] for r in history]
    for ours, theirs in zip(rows, history):
        for key, value in theirs.items():
            if key not in ("recorded_at", "step", "training_step"):
                assert ours[key] == pytest.approx(value), key
    for name, groups in art_run["files"].items():
        _, split, file = name.split("/")
        page = view.json(f"{RUN}/trajectories", split=split, step=int(file[:4]), limit=50)
        assert page["errors"] == [] and page["total"] == len(groups), name
        assert [[t["reward"] for t in g["trajectories"]] for g in page["groups"]] == [
            [pytest.approx(t.get("reward", 0.0)) for t in g.get("trajectories") or []]
            for g in groups
        ]
        assert [len(g["exceptions"]) for g in page["groups"]] == [
            len(g.get("exceptions") or []) for g in groups
        ]
    weather = view.json(f"{RUN}/trajectories", split="val", step=0)["groups"][0]
    calls = [
        c["name"] for t in weather["trajectories"] for m in t["messages"] for c in m["tool_calls"]
    ]
    assert "get_weather" in calls
    assert view.json(f"{RUN}/checkpoints")["checkpoints"] == []
    assert snapshot(art_run["base"]) == before
