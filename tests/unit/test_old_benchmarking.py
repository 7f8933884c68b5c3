"""ART's old benchmarks (`arthex.art.utils.old_benchmarking`) on runs written here in the
layout ART wrote before parquet (history.jsonl, trajectories/{split}/{step:04d}.jsonl or
.yaml): worked examples of the step averages and the reward spread (computed by hand and
with numpy), the table, the graph files, and each bad input refused with its name."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from arthex.apps import old_benchmarking as impl
from arthex.art.utils.old_benchmarking.calculate_step_metrics import calculate_step_std_dev
from arthex.art.utils.old_benchmarking.display_image_grid import display_image_grid
from arthex.art.utils.old_benchmarking.generate_comparison_table import (
    generate_comparison_table,
)
from arthex.art.utils.old_benchmarking.generate_line_graphs import generate_line_graphs
from arthex.art.utils.old_benchmarking.load_benchmarked_models import load_benchmarked_models
from arthex.art.utils.old_benchmarking.types import (
    BenchmarkedModel,
    BenchmarkedModelKey,
    BenchmarkedModelStep,
)
from arthex.core.errors import InvalidInputError, InvalidNameError
from arthex.core.trajectories import Trajectory, TrajectoryGroup


def trajectory(score: float, **metrics: float) -> dict[str, Any]:
    return {
        "messages_and_choices": [{"role": "user", "content": f"q {score}"}],
        "reward": score,
        "metrics": metrics,
        "metadata": {},
        "logs": [],
    }


def group(*trajectories: dict[str, Any]) -> dict[str, Any]:
    return {"trajectories": list(trajectories), "exceptions": []}


# step 0: group 1 rewards 1 and 0 (one says correct=1), group 2 one trajectory of reward 0.5
# whose metrics say reward 0.25 (the metric wins) and correct 0
STEP_0 = [group(trajectory(1.0, correct=1), trajectory(0.0)),
          group(trajectory(0.5, correct=0, reward=0.25))]  # fmt: skip
STEP_1 = [group(trajectory(0.2), trajectory(0.4), trajectory(0.9))]
STEP_2 = [group(trajectory(1.0), trajectory(1.0))]


def write_run(
    base: Path, model: str = "agent", split: str = "val", steps: dict[int, Any] | None = None
) -> Path:
    """A run folder of project `proj`: a history and each step's groups (a `.yaml` file
    for a step given as ("yaml", groups), else `.jsonl`)."""
    run = base / "proj" / "models" / model
    folder = run / "trajectories" / split
    folder.mkdir(parents=True, exist_ok=True)
    given = {0: STEP_0, 1: STEP_1, 2: ("yaml", STEP_2)} if steps is None else steps
    for step, groups in given.items():
        if isinstance(groups, tuple):
            (folder / f"{step:04d}.yaml").write_text(yaml.safe_dump(groups[1]))
        else:
            (folder / f"{step:04d}.jsonl").write_text("\n".join(json.dumps(g) for g in groups))
    rows = [
        {"step": 0, "recorded_at": "2025-04-17T10:00:00.000001", "val/reward": 0.1},
        {"step": 1, "val/reward": 0.2},  # no time: not read
        {"step": 0, "recorded_at": "2025-04-17T11:30:00"},  # the step's latest row wins
        {"step": 2, "recorded_at": "2025-04-18T09:15:00.5"},
    ]
    (run / "history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


# -- the reward spread ---------------------------------------------------------------------------


def groups_of(*rewards: list[float]) -> list[TrajectoryGroup]:
    return [
        TrajectoryGroup(
            [
                Trajectory(messages_and_choices=[{"role": "user", "content": "q"}], reward=r)
                for r in each
            ]
        )
        for each in rewards
    ]


def test_the_step_std_dev_is_the_mean_of_each_groups_population_std_dev() -> None:
    groups = groups_of([1.0, 0.0], [0.2, 0.4, 0.9], [0.7])
    # by hand: [1, 0] spreads 0.5 around 0.5; [0.2, 0.4, 0.9] around 0.5 has squared
    # deviations 0.09 + 0.01 + 0.16 = 0.26 over 3; the single trajectory is left out
    by_hand = (0.5 + math.sqrt(0.26 / 3)) / 2
    assert calculate_step_std_dev(groups) == pytest.approx(by_hand, rel=1e-12)
    with_numpy = np.mean([np.std([1.0, 0.0]), np.std([0.2, 0.4, 0.9])])
    assert calculate_step_std_dev(groups) == pytest.approx(float(with_numpy), rel=1e-12)


def test_no_group_of_two_gives_a_spread_of_zero() -> None:
    assert calculate_step_std_dev(groups_of([0.3], [])) == 0.0
    assert calculate_step_std_dev([]) == 0.0


# -- loading a run -------------------------------------------------------------------------------


def test_each_step_averages_its_groups_means(tmp_path: Path) -> None:
    write_run(tmp_path)
    key = BenchmarkedModelKey("agent", "val")
    (model,) = load_benchmarked_models(
        "proj", [key], ["reward", "correct", "absent"], str(tmp_path)
    )
    assert isinstance(model, BenchmarkedModel)
    assert [s.index for s in model.steps] == [0, 1, 2]
    step_0, step_1, step_2 = model.steps
    assert isinstance(step_0, BenchmarkedModelStep)
    # reward: group means (1 + 0) / 2 and 0.25 (the metric, not the reward 0.5); correct:
    # group 1's one trajectory that has it (1), group 2's (0)
    assert step_0.metrics == {"reward": 0.375, "correct": 0.5, "reward_std_dev": 0.5}
    assert step_1.metrics["reward"] == pytest.approx(0.5)
    assert step_1.metrics["reward_std_dev"] == pytest.approx(float(np.std([0.2, 0.4, 0.9])))
    assert step_2.metrics == {"reward": 1.0, "reward_std_dev": 0.0}  # read from the YAML file
    # the latest history row of each step with a time
    assert step_0.recorded_at is not None and step_0.recorded_at.isoformat() == (
        "2025-04-17T11:30:00"
    )
    assert step_1.recorded_at is None
    assert step_2.recorded_at is not None and step_2.recorded_at.microsecond == 500000
    # the key given is left as it was; the model holds a copy with the steps resolved
    assert key.step_indices is None
    assert model.model_key.step_indices == [0, 1, 2]
    assert str(model.model_key) == "agent val 0-2"
    assert (
        str(model).splitlines()[1] == "0 {'reward': 0.375, 'correct': 0.5, 'reward_std_dev': 0.5}"
    )


def test_a_jsonl_file_is_read_before_a_yaml_one_of_the_same_step(tmp_path: Path) -> None:
    run = write_run(tmp_path, steps={0: STEP_0})
    (run / "trajectories" / "val" / "0000.yaml").write_text(yaml.safe_dump(STEP_2))
    (model,) = load_benchmarked_models("proj", [BenchmarkedModelKey("agent", "val")], [],
                                       str(tmp_path))  # fmt: skip
    assert model.steps[0].metrics == {"reward_std_dev": 0.5}


def test_the_latest_step_is_the_highest_file_and_negative_indices_count_back(
    tmp_path: Path,
) -> None:
    # written highest first, and with names that are not step files beside them
    steps = {12: STEP_2, 3: STEP_1, 10: STEP_0, 11: STEP_0}
    run = write_run(tmp_path, steps=steps)
    (run / "trajectories" / "val" / "notes.jsonl").write_text("{}")
    (run / "trajectories" / "val" / "0099.parquet").write_bytes(b"PAR1")
    (run / "trajectories" / "val" / "13.jsonl").write_text("")  # not a name ART writes
    keys = [
        BenchmarkedModelKey("agent", "val", [-1]),
        BenchmarkedModelKey("agent", "val", [-3, 3, -2]),
    ]
    last, several = load_benchmarked_models("proj", keys, ["reward"], str(tmp_path))
    assert [s.index for s in last.steps] == [12]
    assert [s.index for s in several.steps] == [10, 3, 11]
    assert str(several.model_key) == "agent val 10-11"
    with pytest.raises(InvalidInputError, match=r"step index -14 .* counts back past step 0"):
        load_benchmarked_models("proj", [BenchmarkedModelKey("agent", "val", [-14])], [],
                                str(tmp_path))  # fmt: skip


def test_every_step_up_to_the_latest_must_have_its_file(tmp_path: Path) -> None:
    write_run(tmp_path, steps={0: STEP_0, 2: STEP_2})
    with pytest.raises(
        FileNotFoundError,
        match=r"no trajectory file for step 1 of model "
        r"'agent', split 'val': neither 0001.jsonl nor 0001.yaml in .*/val",
    ):
        load_benchmarked_models("proj", [BenchmarkedModelKey("agent", "val")], [], str(tmp_path))


# -- bad input -----------------------------------------------------------------------------------


def test_a_run_without_its_history_is_refused_by_name(tmp_path: Path) -> None:
    run = write_run(tmp_path)
    (run / "history.jsonl").unlink()
    with pytest.raises(FileNotFoundError, match=r"no history.jsonl in .*/proj/models/agent"):
        load_benchmarked_models("proj", [BenchmarkedModelKey("agent", "val")], [], str(tmp_path))


def test_an_unknown_split_names_the_splits_there(tmp_path: Path) -> None:
    write_run(tmp_path)
    write_run(tmp_path, split="train")
    with pytest.raises(
        FileNotFoundError,
        match=r"model 'agent' has no split 'test': .* "
        r"\(splits there: train, val\)",
    ):
        load_benchmarked_models("proj", [BenchmarkedModelKey("agent", "test")], [], str(tmp_path))


def test_an_unknown_model_names_its_missing_history(tmp_path: Path) -> None:
    write_run(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"no history.jsonl in .*/models/other"):
        load_benchmarked_models("proj", [BenchmarkedModelKey("other", "val")], [], str(tmp_path))


def test_a_split_of_parquet_files_points_to_the_new_benchmarks(tmp_path: Path) -> None:
    run = write_run(tmp_path, steps={})
    (run / "trajectories" / "val" / "0001.parquet").write_bytes(b"PAR1")
    with pytest.raises(FileNotFoundError, match=r"no step files .* art.utils.benchmarking"):
        load_benchmarked_models("proj", [BenchmarkedModelKey("agent", "val")], [], str(tmp_path))


@pytest.mark.parametrize(
    ("project", "model", "split", "what"),
    [("../x", "agent", "val", "project"), ("proj", "a/b", "val", "model"),
     ("proj", "agent", "..", "split")],
)  # fmt: skip
def test_names_that_become_paths_are_checked(
    tmp_path: Path, project: str, model: str, split: str, what: str
) -> None:
    write_run(tmp_path)
    with pytest.raises(InvalidNameError, match=what):
        load_benchmarked_models(project, [BenchmarkedModelKey(model, split)], [], str(tmp_path))


def test_a_broken_history_line_or_time_is_named(tmp_path: Path) -> None:
    run = write_run(tmp_path)
    history = run / "history.jsonl"
    good = history.read_text()
    key = [BenchmarkedModelKey("agent", "val")]
    history.write_text(good + "{not json\n")
    with pytest.raises(InvalidInputError, match=r"history.jsonl line 5 is not JSON"):
        load_benchmarked_models("proj", key, [], str(tmp_path))
    history.write_text(good + json.dumps({"step": 3, "recorded_at": "yesterday"}) + "\n")
    with pytest.raises(InvalidInputError, match=r"line 5: recorded_at 'yesterday' is not an ISO"):
        load_benchmarked_models("proj", key, [], str(tmp_path))


def test_a_step_file_that_is_not_groups_is_named(tmp_path: Path) -> None:
    run = write_run(tmp_path, steps={0: STEP_0})
    (run / "trajectories" / "val" / "0000.jsonl").write_text('{"trajectories": 3}')
    with pytest.raises(InvalidInputError, match=r"0000.jsonl is not a file of trajectory groups"):
        load_benchmarked_models("proj", [BenchmarkedModelKey("agent", "val")], [], str(tmp_path))


# -- the table and the graphs --------------------------------------------------------------------


def test_the_table_has_a_row_per_step_with_text_cells(tmp_path: Path) -> None:
    write_run(tmp_path)
    keys = [BenchmarkedModelKey("agent", "val", [0, 2])]
    table = generate_comparison_table("proj", keys, ["reward", "correct"], str(tmp_path))
    assert table.columns == ["Model", "Split", "Step", "reward", "correct"]
    assert table.rows() == [
        ("agent", "val", "0000", "0.375", "0.5"),
        ("agent", "val", "0002", "1.0", "N/A"),
    ]


def test_the_graphs_are_one_png_per_metric_under_the_default_art_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    write_run(tmp_path / "runs")
    write_run(tmp_path / "runs", model="baseline", steps={0: STEP_1})
    paths = generate_line_graphs(
        "proj", [BenchmarkedModelKey("agent", "val")], [BenchmarkedModelKey("baseline", "val")],
        ["reward", "reward_std_dev"], api_path=str(tmp_path / "runs"),
    )  # fmt: skip
    folder = tmp_path / ".art" / "proj" / "benchmarks"
    assert [Path(p).parent.resolve() for p in paths] == [folder.resolve()] * 2
    # {local time to the millisecond}_{metric}_line_graph.png, one time for the call
    names = [Path(p).name.split("_", 2) for p in paths]
    assert [n[2] for n in names] == ["reward_line_graph.png", "reward_std_dev_line_graph.png"]
    assert names[0][:2] == names[1][:2] and len(names[0][1]) == len("22:09:57.865")
    for path in paths:
        assert Path(path).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in folder.iterdir()) == sorted(Path(p).name for p in paths)


def test_the_time_axis_leaves_out_a_model_with_a_step_not_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    write_run(tmp_path / "runs")
    keys = [BenchmarkedModelKey("agent", "val", [0, 2]), BenchmarkedModelKey("agent", "val")]
    (path,) = generate_line_graphs("proj", keys, [], x_axis_metric="time",
                                   api_path=str(tmp_path / "runs"))  # fmt: skip
    assert Path(path).is_file()
    assert capsys.readouterr().out == (
        "WARNING: Model agent val 0-2 is missing a recorded_at time for step 1, removing "
        "from line graph models\n"
    )


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"x_axis_metric": "wall"}, r"x_axis_metric must be 'step' or 'time', not 'wall'"),
        ({"metrics": ["val/reward"]}, r"metric 'val/reward' is not a safe path segment"),
        ({"metrics": ["correct"]}, r"comparison key .*'baseline'.* has no 'correct' at step 0"),
        ({"references": [BenchmarkedModelKey("baseline", "val", [])]}, r"has no step to draw"),
    ],
)
def test_bad_graph_input_is_refused_before_the_folder_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: dict[str, Any], error: str
) -> None:
    monkeypatch.chdir(tmp_path)
    write_run(tmp_path / "runs")
    write_run(tmp_path / "runs", model="baseline", steps={0: STEP_1})
    arguments: dict[str, Any] = {
        "project": "proj",
        "line_graph_keys": [BenchmarkedModelKey("agent", "val")],
        "comparison_keys": change.pop("references", [BenchmarkedModelKey("baseline", "val")]),
        "api_path": str(tmp_path / "runs"),
    }
    with pytest.raises(InvalidInputError, match=error):
        generate_line_graphs(**arguments, **change)
    assert not (tmp_path / ".art").exists()


def test_the_image_grid_is_a_css_grid_of_escaped_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    grid = impl.image_grid_html(["a.png", "it's <b>.png"], 3)
    assert grid == (
        "\n    <div style='display: grid; grid-template-columns: repeat(3, 1fr); gap: 10px;'>"
        "\n    <img src='a.png' style='max-width: 100%; height: auto;'>"
        "<img src='it&#x27;s &lt;b&gt;.png' style='max-width: 100%; height: auto;'></div>"
    )
    with pytest.raises(InvalidInputError, match="images_per_row must be at least 1, not 0"):
        impl.image_grid_html([], 0)
    monkeypatch.setitem(sys.modules, "IPython", None)  # a Python without IPython
    monkeypatch.setitem(sys.modules, "IPython.display", None)
    with pytest.raises(ImportError, match=r"display_image_grid .* needs IPython"):
        display_image_grid(["a.png"])
