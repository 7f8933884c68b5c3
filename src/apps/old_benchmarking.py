"""ART's first benchmarks (`art.utils.old_benchmarking`): per-step averages of a model's
trajectory files in the layout ART wrote before parquet, as a table and as line graphs.

A run in that layout is `{api_path}/{project}/models/{model}/` with a `history.jsonl` (one
JSON object a line; the rows with a `recorded_at` give each step its time) and
`trajectories/{split}/{step:04d}.jsonl` (or `.yaml`, older still), one trajectory group a
line, read with arthex's reader of those files (`art.utils.trajectory_migration`).

```python
keys = [BenchmarkedModelKey("agent-001", "val"), BenchmarkedModelKey("gpt-4o", "val", [0])]
models = load_benchmarked_models("my-project", keys, metrics=["reward", "correct"])
table = generate_comparison_table("my-project", keys)  # a polars DataFrame
paths = generate_line_graphs("my-project", keys[:1], keys[1:])  # one PNG per metric
```

Each step's value of a metric is the mean over the step's groups of the mean over the group's
trajectories that have the metric (a trajectory's `reward` counts as its metric `reward`
unless it has one); `reward_std_dev` is the mean over the groups of more than one trajectory
of their rewards' population standard deviation.

Where this differs from ART 0.5.23 (docs/migrating-from-art.md says why): the latest step is
the highest step file in the split's folder (ART took the last name of an unsorted listing);
a negative step index counts from the end as Python's do (-1: the latest step; ART's gave the
step two before it); `recorded_at` is a datetime (ART kept the file's text, which its time
axis cannot draw); the table is a polars DataFrame; and a missing file, split or metric is
refused with an error naming it before anything is written.
"""

from __future__ import annotations

import copy
import html
import importlib
import json
import math
import os
import tempfile
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from ..adapters.parquet.migration import deserialize_trajectory_groups
from ..core.errors import InvalidInputError, MissingExtraError
from ..core.identity import validate_name
from ..utils.output_dirs import (
    get_default_art_path,
    get_output_dir_from_model_properties,
    get_trajectories_split_dir,
)

if TYPE_CHECKING:
    import polars as pl

    from ..core.trajectories import TrajectoryGroup

__all__ = [
    "BenchmarkedModel",
    "BenchmarkedModelKey",
    "BenchmarkedModelStep",
    "calculate_step_std_dev",
    "display_image_grid",
    "generate_comparison_table",
    "generate_line_graphs",
    "image_grid_html",
    "load_benchmarked_models",
]

_STEP_FILE_SUFFIXES = (".jsonl", ".yaml")


class BenchmarkedModelKey:
    """A model's split to benchmark, at `step_indices` (None: every step; a negative index
    counts back from the latest step, -1 being the latest)."""

    def __init__(self, model: str, split: str, step_indices: list[int] | None = None) -> None:
        self.model = model
        self.split = split
        self.step_indices = step_indices

    def __str__(self) -> str:
        steps = ""
        if self.step_indices:
            first, last = self.step_indices[0], self.step_indices[-1]
            steps = f"{first}" if len(self.step_indices) == 1 else f"{first}-{last}"
        return f"{self.model} {self.split} {steps}"

    def __repr__(self) -> str:
        return f"BenchmarkedModelKey({self.model!r}, {self.split!r}, {self.step_indices!r})"


class BenchmarkedModelStep:
    """One step's averaged metrics, and when the model's history recorded the step."""

    def __init__(self, index: int, metrics: dict[str, float] | None = None) -> None:
        self.index = index
        self.metrics: dict[str, float] = {} if metrics is None else metrics
        self.recorded_at: datetime | None = None

    def __str__(self) -> str:
        return f"{self.index} {self.metrics}"

    def __repr__(self) -> str:
        return f"BenchmarkedModelStep({self.index!r}, {self.metrics!r})"


class BenchmarkedModel:
    """A key (its step indices resolved) and its steps, in the key's order."""

    def __init__(
        self, model_key: BenchmarkedModelKey, steps: list[BenchmarkedModelStep] | None = None
    ) -> None:
        self.model_key = model_key
        self.steps: list[BenchmarkedModelStep] = [] if steps is None else steps

    def __str__(self) -> str:
        lines = "\n".join(str(step) for step in self.steps)
        return f"{self.model_key}\n{lines}"

    def __repr__(self) -> str:
        return f"BenchmarkedModel({self.model_key!r}, {self.steps!r})"


# -- the numbers ---------------------------------------------------------------------------------


def _population_std(values: Sequence[float]) -> float:
    mean = math.fsum(values) / len(values)
    return math.sqrt(math.fsum((v - mean) ** 2 for v in values) / len(values))


def calculate_step_std_dev(trajectory_groups: Iterable[TrajectoryGroup]) -> float:
    """The mean, over the groups with more than one trajectory, of the population standard
    deviation of their rewards (numpy's `np.std`, ddof 0); 0.0 when no group has two. An
    exception standing in a group's trajectories (ART's older groups) is skipped."""
    spreads = []
    for group in trajectory_groups:
        rewards = [float(t.reward) for t in group.trajectories if not isinstance(t, BaseException)]
        if len(rewards) > 1:
            spreads.append(_population_std(rewards))
    return math.fsum(spreads) / len(spreads) if spreads else 0.0


def _step_metrics(groups: list[TrajectoryGroup], metrics: Sequence[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for metric in metrics:
        means = []
        for group in groups:
            values = []
            for trajectory in group.trajectories:
                if isinstance(trajectory, BaseException):
                    continue
                found = dict(trajectory.metrics)
                found.setdefault("reward", trajectory.reward)
                if metric in found:
                    values.append(float(found[metric]))
            if values:
                means.append(sum(values) / len(values))
        if means:
            out[metric] = sum(means) / len(means)
    out["reward_std_dev"] = calculate_step_std_dev(groups)
    return out


# -- reading a run -------------------------------------------------------------------------------


def _recorded_times(history: Path) -> list[tuple[object, datetime]]:
    """(step, recorded_at) of each history row that has a `recorded_at`, in file order."""
    if not history.is_file():
        raise FileNotFoundError(
            f"no history.jsonl in {history.parent}: the old benchmarks read a run folder "
            "that ART wrote (history.jsonl and trajectories/{split}/{step:04d}.jsonl)"
        )
    rows = []
    with history.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                raise InvalidInputError(
                    f"{history} line {number} is not JSON: {error.msg}"
                ) from error
            if not isinstance(row, dict) or "recorded_at" not in row:
                continue
            when = row["recorded_at"]
            try:
                recorded = datetime.fromisoformat(when)
            except (TypeError, ValueError) as error:
                raise InvalidInputError(
                    f"{history} line {number}: recorded_at {when!r} is not an ISO 8601 time"
                ) from error
            rows.append((row.get("step"), recorded))
    return rows


def _step_files(split_dir: Path, key: BenchmarkedModelKey) -> dict[int, Path]:
    """Each step's trajectory file in the split's folder, named as ART names them
    (`{step:04d}.jsonl`, read before `{step:04d}.yaml`)."""
    if not split_dir.is_dir():
        trajectories = split_dir.parent
        known = []
        if trajectories.is_dir():
            known = sorted(p.name for p in trajectories.iterdir() if p.is_dir())
        raise FileNotFoundError(
            f"model {key.model!r} has no split {key.split!r}: {split_dir} does not exist "
            f"(splits there: {', '.join(known) or 'none'})"
        )
    files: dict[int, Path] = {}
    for suffix in reversed(_STEP_FILE_SUFFIXES):
        for path in split_dir.iterdir():
            stem = path.stem
            named = stem.isdigit() and stem == f"{int(stem):04d}"
            if path.suffix == suffix and named and path.is_file():
                files[int(path.stem)] = path
    if not files:
        raise FileNotFoundError(
            f"no step files ({{step:04d}}.jsonl or .yaml) in {split_dir}: the old benchmarks "
            "read ART's files from before parquet; for parquet runs use "
            "art.utils.benchmarking (load_aggregated_trajectories)"
        )
    return files


def _resolve_indices(key: BenchmarkedModelKey, latest: int) -> list[int]:
    if key.step_indices is None:
        return list(range(latest + 1))
    resolved = []
    for index in key.step_indices:
        if isinstance(index, bool) or not isinstance(index, int):
            raise InvalidInputError(f"step index {index!r} of {key!r} is not an integer")
        if index < 0:
            if index < -(latest + 1):
                raise InvalidInputError(
                    f"step index {index} of {key!r} counts back past step 0 "
                    f"(the latest step is {latest})"
                )
            index += latest + 1
        resolved.append(index)
    return resolved


def _load_one(
    project: str, key: BenchmarkedModelKey, metrics: Sequence[str], api_path: str
) -> BenchmarkedModel:
    model_dir = Path(
        get_output_dir_from_model_properties(project=project, name=key.model, art_path=api_path)
    )
    split_dir = Path(get_trajectories_split_dir(str(model_dir), key.split))
    times = _recorded_times(model_dir / "history.jsonl")
    files = _step_files(split_dir, key)
    key.step_indices = _resolve_indices(key, max(files))
    model = BenchmarkedModel(key)
    for index in key.step_indices:
        path = files.get(index)
        if path is None:
            raise FileNotFoundError(
                f"no trajectory file for step {index} of model {key.model!r}, split "
                f"{key.split!r}: neither {index:04d}.jsonl nor {index:04d}.yaml in {split_dir}"
            )
        try:
            groups = deserialize_trajectory_groups(path.read_text(encoding="utf-8"))
        except ImportError:
            raise
        except Exception as error:
            raise InvalidInputError(
                f"{path} is not a file of trajectory groups: {error}"
            ) from error
        step = BenchmarkedModelStep(index, _step_metrics(groups, metrics))
        for logged, when in reversed(times):  # the latest row of the step
            if logged == index:
                step.recorded_at = when
                break
        model.steps.append(step)
    return model


def load_benchmarked_models(
    project: str,
    benchmark_keys: Sequence[BenchmarkedModelKey],
    metrics: Sequence[str] = ("reward",),
    api_path: str = "./.art",
) -> list[BenchmarkedModel]:
    """Each key's steps with their averaged `metrics` (and `reward_std_dev`), read from
    `{api_path}/{project}/models/{key.model}`. The keys given are not changed: each model
    holds a copy, its step indices resolved."""
    validate_name(project, "project")
    for key in benchmark_keys:
        validate_name(key.model, "model")
        validate_name(key.split, "split")
    metrics = list(metrics)
    return [
        _load_one(project, key, metrics, api_path) for key in copy.deepcopy(list(benchmark_keys))
    ]


# -- the table -----------------------------------------------------------------------------------


def generate_comparison_table(
    project: str,
    benchmark_keys: Sequence[BenchmarkedModelKey],
    metrics: Sequence[str] = ("reward",),
    api_path: str = "./.art",
) -> pl.DataFrame:
    """A row per benchmarked step: `Model`, `Split`, `Step` (`0003`) and each metric as text
    (`str` of the value, `N/A` where the step has none), all columns strings."""
    import polars as pl

    metrics = list(metrics)
    columns = ["Model", "Split", "Step", *metrics]
    rows = [
        [model.model_key.model, model.model_key.split, f"{step.index:04d}"]
        + [str(step.metrics[m]) if m in step.metrics else "N/A" for m in metrics]
        for model in load_benchmarked_models(project, benchmark_keys, metrics, api_path)
        for step in model.steps
    ]
    return pl.DataFrame(rows, schema=dict.fromkeys(columns, pl.String), orient="row")


# -- the line graphs -----------------------------------------------------------------------------


def _timed(models: list[BenchmarkedModel]) -> list[BenchmarkedModel]:
    kept = []
    for model in models:
        missing = next((s for s in model.steps if s.recorded_at is None), None)
        if missing is not None:
            print(
                f"WARNING: Model {model.model_key} is missing a recorded_at time for step "
                f"{missing.index}, removing from line graph models"
            )
            continue
        kept.append(model)
    return kept


def generate_line_graphs(
    project: str,
    line_graph_keys: Sequence[BenchmarkedModelKey],
    comparison_keys: Sequence[BenchmarkedModelKey],
    metrics: Sequence[str] = ("reward",),
    x_axis_metric: Literal["step", "time"] = "step",
    api_path: str = "./.art",
) -> list[str]:
    """One PNG per metric in `{default art path}/{project}/benchmarks/`, named
    `{local time}_{metric}_line_graph.png`; their paths. Each line-graph key is a line over
    its steps (x: the step, or with `x_axis_metric="time"` when the history recorded it; a
    model with a step not recorded is left out, with a warning), its last point dotted; each
    comparison key a black dashed line at its last step's value, labelled. Everything is read
    and checked before the folder is made; each file is written whole (a temporary file
    renamed)."""
    if x_axis_metric not in ("step", "time"):
        raise InvalidInputError(f"x_axis_metric must be 'step' or 'time', not {x_axis_metric!r}")
    metrics = [validate_name(m, "metric") for m in metrics]
    lines = load_benchmarked_models(project, line_graph_keys, metrics, api_path)
    if x_axis_metric == "time":
        lines = _timed(lines)
    references = load_benchmarked_models(project, comparison_keys, metrics, api_path)
    for model in references:
        if not model.steps:
            raise InvalidInputError(f"comparison key {model.model_key!r} has no step to draw")
        for metric in metrics:
            if metric not in model.steps[-1].metrics:
                raise InvalidInputError(
                    f"comparison key {model.model_key!r} has no {metric!r} at step "
                    f"{model.steps[-1].index}"
                )
    try:
        from matplotlib import dates
        from matplotlib.figure import Figure
    except ImportError as error:
        raise MissingExtraError("matplotlib", "cli") from error

    def x_of(step: BenchmarkedModelStep) -> float:
        if x_axis_metric == "time":
            when = step.recorded_at or datetime.min
            return float(dates.date2num(when))  # type: ignore[no-untyped-call]
        return float(step.index)

    folder = Path(get_default_art_path()) / project / "benchmarks"
    folder.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now().strftime("%Y-%m-%d_%H:%M:%S.%f")[:-3]
    paths = []
    for metric in metrics:
        fig = Figure()
        ax = fig.subplots()
        last_x: float | None = None
        for model in lines:
            xs = [x_of(step) for step in model.steps]
            ys = [step.metrics.get(metric, math.nan) for step in model.steps]
            ax.plot(xs, ys, label=f"{model.model_key.model} {model.model_key.split}")
            if xs:
                last_x = xs[-1]
                ax.scatter(xs[-1], ys[-1], s=10)
        for model in references:
            value = model.steps[-1].metrics[metric]
            ax.axhline(y=value, color="black", linestyle="--")
            ax.text(0.0 if last_x is None else last_x, value,
                    f"{model.model_key.model} {model.model_key.split}", ha="right",
                    va="bottom", fontsize=8, color="black")  # fmt: skip
        ax.set_title(metric)
        ax.set_xlabel(x_axis_metric)
        ax.set_ylabel(metric)
        if lines:
            ax.legend()
        ax.grid(axis="y", color="lightgray", linestyle="--", linewidth=0.25)
        target = folder / f"{stamp}_{metric}_line_graph.png"
        handle, temporary = tempfile.mkstemp(dir=folder, prefix=".", suffix=".png")
        os.close(handle)
        try:
            fig.savefig(temporary, format="png")
            os.replace(temporary, target)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
        paths.append(str(target))
    return paths


# -- showing the graphs in a notebook ------------------------------------------------------------


def image_grid_html(image_paths: Iterable[str], images_per_row: int = 2) -> str:
    """The HTML `display_image_grid` shows: a CSS grid of `images_per_row` columns, one
    `<img>` per path (the path escaped for an HTML attribute)."""
    if isinstance(images_per_row, bool) or not isinstance(images_per_row, int):
        raise InvalidInputError(f"images_per_row must be an integer, not {images_per_row!r}")
    if images_per_row < 1:
        raise InvalidInputError(f"images_per_row must be at least 1, not {images_per_row}")
    cells = "".join(
        f"<img src='{html.escape(path, quote=True)}' style='max-width: 100%; height: auto;'>"
        for path in image_paths
    )
    return (
        "\n    <div style='display: grid; grid-template-columns: "
        f"repeat({images_per_row}, 1fr); gap: 10px;'>\n    {cells}</div>"
    )


def display_image_grid(image_paths: list[str], images_per_row: int = 2) -> None:
    """Show the images (the paths `generate_line_graphs` returns) in a grid in a Jupyter
    notebook, through IPython's display."""
    grid = image_grid_html(image_paths, images_per_row)
    try:
        shown = importlib.import_module("IPython.display")
    except ImportError as error:
        raise ImportError(
            "display_image_grid shows images in a Jupyter notebook and needs IPython, which "
            "is not installed: pip install ipython (or use image_grid_html for the HTML)"
        ) from error
    shown.display(shown.HTML(grid))
