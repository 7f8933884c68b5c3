"""ART 0.5.23's old benchmarks (`art.utils.old_benchmarking`) and arthex's under
`arthex.art.utils.old_benchmarking` read one run folder in ART's pre-parquet layout, written
here as files (history.jsonl with `recorded_at` rows, trajectories/{split}/{step:04d}.jsonl
and .yaml), and give the same steps and metrics, the same comparison table, line graphs that
draw the same lines, dots and labels, the same image-grid HTML, and the same kind of error for
a missing history, split or step file. One script runs both (art/old_benchmarking_script.py),
each in the ART plotting venv (art_plotting_env.py), in a scratch folder of its own.

Where arthex differs on purpose (docs/migrating-from-art.md), the test says so: ART takes the
latest step from an unsorted folder listing, its negative index -1 is the step two before
the latest, and its time axis fails on the history's text times."""

from __future__ import annotations

import json
import subprocess
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from .art_env import SCRIPTS, art_environment, checkout_pyroot
from .art_plotting_env import art_plotting_python


def trajectory(score: float, **metrics: float) -> dict[str, Any]:
    return {
        "messages_and_choices": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": f"question {score}"},
            {"role": "assistant", "content": "answer"},
        ],
        "reward": score,
        "metrics": metrics,
        "metadata": {"scenario": "s"},
        "logs": ["done"],
    }


def group(*trajectories: dict[str, Any]) -> dict[str, Any]:
    return {"trajectories": list(trajectories), "exceptions": []}


def write_project(base: Path) -> None:
    """Project `old` under `base`: `agent` (train 0..3 and val 0..2, a YAML step among
    them, a step with both files) and `prompted` (val 0), each with its history."""
    steps = {
        0: [group(trajectory(0.0, correct=0), trajectory(1.0, correct=1)),
            group(trajectory(0.5, reward=0.25))],
        1: [group(trajectory(0.2, correct=1), trajectory(0.4), trajectory(0.9, correct=0)),
            group(trajectory(0.7))],
        2: [group(trajectory(1.0, correct=1), trajectory(0.6, correct=1))],
        3: [group(trajectory(0.8), trajectory(0.1)), group(trajectory(0.3), trajectory(0.3))],
    }  # fmt: skip
    runs = {
        ("agent", "train"): {s: ("jsonl", steps[s]) for s in (0, 2, 3)} | {1: ("yaml", steps[1])},
        ("agent", "val"): {0: ("jsonl", steps[2]), 1: ("yaml", steps[3]), 2: ("jsonl", steps[0])},
        ("prompted", "val"): {0: ("jsonl", steps[1])},
    }  # fmt: skip
    for (model, split), files in runs.items():
        folder = base / "old" / "models" / model / "trajectories" / split
        folder.mkdir(parents=True)
        for step, (kind, groups) in files.items():
            text = yaml.safe_dump(groups) if kind == "yaml" else "\n".join(map(json.dumps, groups))
            (folder / f"{step:04d}.{kind}").write_text(text)
    # the same step in both files: both libraries read the JSONL one
    (base / "old/models/agent/trajectories/val/0002.yaml").write_text(yaml.safe_dump(steps[3]))
    history: dict[str, list[dict[str, Any]]] = {
        "agent": [
            {"step": 0, "recorded_at": "2025-04-17T22:09:57.865123", "train/reward": 0.5},
            {"step": 1, "recorded_at": "2025-04-17T22:19:00.000001"},
            {"step": 1, "recorded_at": "2025-04-17T22:20:30"},
            {"step": 2, "val/reward": 0.6},
            {"step": 2, "recorded_at": "2025-04-17T22:31:12.5"},
            {"step": 3, "recorded_at": "2025-04-17T22:40:00"},
        ],
        "prompted": [{"step": 0, "val/reward": 0.55}],
    }
    for model, rows in history.items():
        text = "".join(json.dumps(row) + "\n" for row in rows)
        (base / "old" / "models" / model / "history.jsonl").write_text(text)


CASES: dict[str, Any] = {
    "project": "old",
    "metrics": ["reward", "correct"],
    "loads": {
        "explicit": [
            ["agent", "train", [0, 2, 3, 1]],
            ["agent", "val", [2, 0]],
            ["prompted", "val", [0]],
        ],
        "empty": [["agent", "val", []]],
        "all train": [["agent", "train"]],
        "all of one": [["prompted", "val"]],
        "negative": [["agent", "train", [-1]]],
    },
    "bad": {
        "no history": [[["nobody", "val", [0]]], "old"],
        "no split": [[["agent", "test", [0]]], "old"],
        "no step file": [[["agent", "val", [5]]], "old"],
        "no project": [[["agent", "val", [0]]], "other"],
    },
    "table": [["agent", "val", [0, 1, 2]], ["prompted", "val", [0]]],
    "lines": [["agent", "train", [0, 1, 2, 3]], ["agent", "val", [0, 1, 2]]],
    "references": [["prompted", "val", [0]]],
    "images": ["/tmp/a b/one.png", "two.png", "three.png"],
}


def run(tmp: Path, lib: str, cases: dict[str, Any]) -> dict[str, Any]:
    cwd = tmp / lib
    cwd.mkdir()
    env = art_environment()
    if lib != "art":
        env["PYTHONPATH"] = str(checkout_pyroot(tmp))
    done = subprocess.run(
        [str(art_plotting_python()), str(SCRIPTS / "old_benchmarking_script.py"), lib],
        input=json.dumps(cases), capture_output=True, text=True, env=env, cwd=cwd, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    out: dict[str, Any] = json.loads(done.stdout)
    return out


def when(text: str | None) -> str | None:
    """A time as datetime's ISO text (ART's steps keep the history's own text)."""
    return None if text is None else datetime.fromisoformat(text).isoformat()


def approx_models(models: list[dict[str, Any]]) -> Any:
    return [
        {**m, "steps": [{**s, "recorded_at": when(s["recorded_at"]),
                         "metrics": pytest.approx(s["metrics"], rel=1e-12)}
                        for s in m["steps"]]}
        for m in models
    ]  # fmt: skip


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("old-benchmarks")
    write_project(tmp / "runs")
    cases = {**CASES, "api_path": str(tmp / "runs")}
    return run(tmp, "art", cases), run(tmp, "arthex.art", cases)


def test_both_load_the_same_steps_and_metrics(outcomes: tuple[dict[str, Any], ...]) -> None:
    art, mine = outcomes
    for name in ("explicit", "all of one"):
        assert "value" in art[f"load {name}"], art[f"load {name}"]
        assert mine[f"load {name}"]["value"] == approx_models(art[f"load {name}"]["value"]), name
    # a key of no step: no step read; ART's key then fails to print (`step_indices[0]`)
    assert art["load empty"] == {"error": "IndexError", "message": "list index out of range"}
    assert mine["load empty"]["value"] == [{"key": ["agent", "val", [], "agent val "], "steps": []}]
    steps = art["load explicit"]["value"][0]["steps"]
    # what ART computed, checked by hand once: train step 0's groups average (0 + 1) / 2 and
    # 0.25 (the metric over the reward 0.5), and spread 0.5 and nothing (one trajectory)
    assert steps[0]["metrics"] == {"reward": 0.375, "correct": 0.5, "reward_std_dev": 0.5}
    # each step's time is its latest history row with one (ART: its text, arthex: a datetime)
    assert [s["recorded_at"] for s in steps] == [
        "2025-04-17T22:09:57.865123", "2025-04-17T22:31:12.5", "2025-04-17T22:40:00",
        "2025-04-17T22:20:30",
    ]  # fmt: skip


def test_every_step_is_read_where_art_reads_a_listing_order(
    outcomes: tuple[dict[str, Any], ...],
) -> None:
    art, mine = outcomes
    (everything,) = mine["load all train"]["value"]
    assert [s["index"] for s in everything["steps"]] == [0, 1, 2, 3]
    # ART stops at the step of the last name the file system lists (here 0..3 in some
    # order, .jsonl and .yaml): its steps are the first of arthex's
    (art_model,) = art["load all train"]["value"]
    assert art_model["steps"], "ART read no step"
    expected = approx_models([art_model])[0]["steps"]
    assert everything["steps"][: len(expected)] == expected


def test_a_negative_index_counts_from_the_latest_step(
    outcomes: tuple[dict[str, Any], ...],
) -> None:
    art, mine = outcomes
    assert [s["index"] for s in mine["load negative"]["value"][0]["steps"]] == [3]
    # ART's -1 is `index - 1 + latest`, latest being the last listed name's step
    art_indices = [s["index"] for s in art["load negative"]["value"][0]["steps"]]
    assert art_indices[0] in {-1 - 1 + latest for latest in (0, 1, 2, 3)}
    assert art_indices != [3]


def test_bad_input_fails_with_the_same_kind_of_error(
    outcomes: tuple[dict[str, Any], ...],
) -> None:
    art, mine = outcomes
    for name in CASES["bad"]:
        assert art[f"bad {name}"]["error"] == "FileNotFoundError", art[f"bad {name}"]
        assert mine[f"bad {name}"]["error"] == "FileNotFoundError", mine[f"bad {name}"]
    assert "no history.jsonl in" in mine["bad no history"]["message"]
    assert "has no split 'test'" in mine["bad no split"]["message"]
    assert "(splits there: train, val)" in mine["bad no split"]["message"]
    assert "no trajectory file for step 5" in mine["bad no step file"]["message"]


def test_both_give_the_same_table(outcomes: tuple[dict[str, Any], ...]) -> None:
    art, mine = outcomes
    assert mine["table"] == art["table"]
    assert art["table"]["columns"] == ["Model", "Split", "Step", "reward", "correct"]
    assert len(art["table"]["rows"]) == 4


def test_the_line_graphs_draw_the_same(outcomes: tuple[dict[str, Any], ...]) -> None:
    art, mine = outcomes
    # one PNG per metric, under .art/old/benchmarks of the working folder
    for files in (art["graph files"], mine["graph files"]):
        assert [f[0].split("_", 2)[2] for f in files] == [
            "reward_line_graph.png", "correct_line_graph.png"
        ]  # fmt: skip
        assert all(f[0].startswith(".art/old/benchmarks/") for f in files)
        assert {f[1] for f in files} == {"89504e470d0a1a0a"}  # PNG's signature
    assert len(art["graphs"]) == 2
    for drawn_art, drawn_mine in zip(art["graphs"], mine["graphs"], strict=True):
        assert drawn_mine == drawn_art


def test_only_arthex_draws_the_time_axis_of_arts_histories(
    outcomes: tuple[dict[str, Any], ...],
) -> None:
    art, mine = outcomes
    # ART keeps recorded_at as the file's text, which matplotlib's date2num cannot convert
    assert art["time graphs"]["error"] == "IndexError"
    assert mine["time graphs"] == {"value": 1}
    (drawn,) = mine["time drawn"]
    assert drawn["xlabel"] == "time" and drawn["legend"] == ["agent train", "agent val"]
    # matplotlib's day numbers of the recorded times (days since 1970-01-01, UTC)
    first = drawn["lines"][0]["x"][0]
    assert first == pytest.approx(20195 + (22 * 3600 + 9 * 60 + 57.865123) / 86400, abs=1e-9)


def test_both_show_the_same_image_grid(outcomes: tuple[dict[str, Any], ...]) -> None:
    art, mine = outcomes
    assert mine["grid"] == art["grid"]
    assert art["grid"][0].count("<img src=") == 3
