"""Compare a project's models from their files: every trajectory as one flat polars row
(ART's `art.utils.benchmarking` frames), step-level averages, the latest step per model, and a
filter that picks (model, split) pairs and renames them for charts.

```python
df = await load_trajectories("my-project", art_path=".art")
steps = await load_aggregated_trajectories("my-project", metrics=["reward"], art_path=".art")
final = await load_latest_metrics("my-project", split="val", art_path=".art")
```

Rows are read with arthex's own loader (`arthex.load_trajectories`: every part of a step,
the step files and the legacy parts not yet folded into them), so a step logged twice shows
both writes; history timestamps with arthex's ledger reader.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..adapters.layout import HISTORY, RunLayout, is_run_dir
from ..core.errors import InvalidInputError, MissingExtraError
from ..core.identity import validate_name
from ..utils.output_dirs import get_default_art_path, get_models_dir
from ..utils.repo_root import get_repo_root_path
from .loaders import load_trajectories as load_model_trajectories

if TYPE_CHECKING:
    import polars as pl

    from ..core.model import Model

__all__ = [
    "BenchmarkModelKey",
    "cache_path",
    "filter_rename_model_split",
    "load_aggregated_trajectories",
    "load_latest_metrics",
    "load_trajectories",
    "log_constant_metrics_wandb",
    "percentage_comparison_bar_chart",
    "pull_model_trajectories",
    "training_progress_chart",
]

_GROUP = ["model", "split", "step"]

# ART's `load_trajectories.cache_path`: `data/cache.db` in the checkout the library runs from
# (`get_repo_root_path()`, "." outside one), where ART's benchmarking once kept a DuckDB cache.
# ART 0.5.23 creates the folder at import and never opens the file; arthex names the same path
# and creates nothing: its loaders read the run's files each time.
cache_path = Path(get_repo_root_path()) / "data" / "cache.db"


class BenchmarkModelKey:
    """A model's rows of one split (`val` unless given), shown under `display_name`."""

    def __init__(self, name: str, display_name: str | None = None, split: str | None = None):
        self.name = name
        self.display_name = display_name or name
        self.split = split or "val"

    def __str__(self) -> str:
        return self.display_name

    def __repr__(self) -> str:
        return f"BenchmarkModelKey({self.name!r}, {self.display_name!r}, {self.split!r})"


def _model_dirs(project_name: str, models: Iterable[str] | None, art_path: str) -> list[Path]:
    root = Path(get_models_dir(project_name, art_path))
    if not root.is_dir():
        return []
    wanted = None if models is None else set(models)
    return sorted(
        d for d in root.iterdir() if is_run_dir(d) and (wanted is None or d.name in wanted)
    )


def _json_object(text: Any) -> dict[str, Any]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, TypeError):
        return {}
    return value if isinstance(value, dict) else {}


def _message(cells: dict[str, Any]) -> dict[str, Any]:
    out = {
        "role": cells["role"],
        "content": cells["content"],
        "trainable": bool(cells["trainable"]),
    }
    if cells.get("tool_calls"):
        try:
            out["tool_calls"] = json.loads(cells["tool_calls"])
        except (json.JSONDecodeError, TypeError):
            pass
    return out


def _frame_schema(columns: dict[str, set[str]]) -> dict[str, Any]:
    import polars as pl

    call = pl.Struct({"function": pl.Struct({"name": pl.String, "arguments": pl.String})})
    message = pl.Struct(
        {
            "role": pl.String,
            "content": pl.String,
            "tool_calls": pl.List(call),
            "trainable": pl.Boolean,
        }
    )
    schema: dict[str, Any] = {
        "model": pl.String,
        "split": pl.String,
        "step": pl.Int64,
        "reward": pl.Float64,
        "group_number": pl.Int64,
        "messages": pl.List(message),
        "logs": pl.List(pl.String),
    }
    for prefix, kind in (("metric_", pl.Float64), ("metadata_", pl.String)):
        for group in ("", "group_"):
            schema.update(dict.fromkeys(sorted(columns[group + prefix]), kind))
    return schema


async def load_trajectories(
    project_name: str,
    models: list[str] | None = None,
    debug: bool = False,
    art_path: str | None = None,
) -> pl.DataFrame:
    """Every trajectory of the project's models (or of `models`) as one row: `model`,
    `split`, `step`, `reward`, `group_number` (1, 2, ... per (model, split, step, group), in
    model, split, step order), `messages` (role, content, tool_calls, trainable), `logs`, and
    one column per key of the trajectories' metrics (`metric_*`, Float64), metadata
    (`metadata_*`, the value as text), group metrics (`group_metric_*`) and group metadata
    (`group_metadata_*`). A group whose every rollout failed has no row. No model, or no
    trajectory, gives an empty frame. `debug` prints what is read."""
    import polars as pl

    base = get_default_art_path() if art_path is None else art_path
    rows: list[dict[str, Any]] = []
    columns: dict[str, set[str]] = {
        key: set() for key in ("metric_", "metadata_", "group_metric_", "group_metadata_")
    }
    numbers: dict[tuple[str, str, int, int], int] = {}
    for directory in _model_dirs(project_name, models, base):
        frame = load_model_trajectories(directory).collect()
        if debug:
            print(f"{directory}: {frame.height} rows")
        for cells in frame.iter_rows(named=True):
            if cells["reward"] is None and cells["messages"] is None:
                continue
            key = (directory.name, cells["split"], cells["step"], cells["group_index"] or 0)
            number = numbers.setdefault(key, len(numbers) + 1)
            row: dict[str, Any] = {
                "model": directory.name,
                "split": cells["split"],
                "step": cells["step"],
                "reward": cells["reward"],
                "group_number": number,
                "messages": [_message(m) for m in cells["messages"] or []],
                "logs": cells["logs"],
            }
            for column, prefix, as_text in (
                ("metrics", "metric_", False),
                ("metadata", "metadata_", True),
                ("group_metrics", "group_metric_", False),
                ("group_metadata", "group_metadata_", True),
            ):
                for name, value in _json_object(cells[column]).items():
                    row[prefix + name] = str(value) if as_text else value
                    columns[prefix].add(prefix + name)
            rows.append(row)
    if not rows:
        return pl.DataFrame()
    return pl.DataFrame(rows, schema=_frame_schema(columns))


def filter_rename_model_split(
    df: pl.DataFrame, models: Sequence[BenchmarkModelKey]
) -> pl.DataFrame:
    """The rows of each key's (model, split), the model renamed to the key's display name."""
    import polars as pl

    def pair(key: BenchmarkModelKey) -> pl.Expr:
        return (pl.col("model") == key.name) & (pl.col("split") == key.split)

    chosen = pl.lit(False)
    for key in models:
        chosen = chosen | pair(key)
    df = df.filter(chosen)
    for key in models:
        if key.name != key.display_name:
            renamed = pl.when(pair(key)).then(pl.lit(key.display_name)).otherwise(pl.col("model"))
            df = df.with_columns(renamed.alias("model"))
    return df


async def load_aggregated_trajectories(
    project_name: str,
    models: list[str] | None = None,
    metrics: list[str] | None = None,
    art_path: str | None = None,
    include_history: bool = False,
) -> pl.DataFrame:
    """One row per (model, split, step): each `metric_*` (or only `metrics`) averaged within
    each group, then across the groups; with `metric_reward`, `metric_reward_std_dev` (each
    group's sample standard deviation, averaged); with `include_history`, `recorded_at`: when
    the model's history first recorded the step (UTC). Sorted by model, split, step."""
    import polars as pl

    df = await load_trajectories(project_name, models=models, art_path=art_path)
    if df.is_empty():
        return df
    names = [c for c in df.columns if c.startswith("metric_")]
    if metrics:
        asked = {f"metric_{m}" for m in metrics}
        names = [c for c in names if c in asked]
    groups = df.group_by([*_GROUP, "group_number"])
    steps = (
        groups.agg([pl.col(c).mean() for c in names])
        .group_by(_GROUP)
        .agg([pl.col(c).mean() for c in names])
    )
    if "metric_reward" in names:
        spread = (
            groups.agg(pl.col("metric_reward").std().alias("spread"))
            .group_by(_GROUP)
            .agg(pl.col("spread").mean().alias("metric_reward_std_dev"))
        )
        steps = steps.join(spread, on=_GROUP, how="left")
    if include_history:
        base = get_default_art_path() if art_path is None else art_path
        recorded = _history_times(project_name, models, base)
        if recorded:
            steps = steps.join(pl.DataFrame(recorded), on=["model", "step"], how="left")
    return steps.sort(_GROUP)


def _history_times(
    project_name: str, models: list[str] | None, art_path: str
) -> dict[str, list[Any]]:
    from ..adapters.jsonl_history import read_rows

    out: dict[str, list[Any]] = {"model": [], "step": [], "recorded_at": []}
    for directory in _model_dirs(project_name, models, art_path):
        if not (directory / HISTORY).is_file():
            continue
        first: dict[int, Any] = {}
        for row in read_rows(directory / HISTORY):
            first.setdefault(row.step, row.recorded_at)
        for step, when in first.items():
            out["model"].append(directory.name)
            out["step"].append(step)
            out["recorded_at"].append(when)
    return out if out["model"] else {}


async def load_latest_metrics(
    project_name: str,
    models: list[str] | None = None,
    split: str = "val",
    metrics: list[str] | None = None,
    art_path: str | None = None,
) -> pl.DataFrame:
    """One row per model: its latest step of `split` and that step's aggregated metrics."""
    import polars as pl

    df = await load_aggregated_trajectories(
        project_name, models=models, metrics=metrics, art_path=art_path
    )
    if df.is_empty():
        return df
    names = [c for c in df.columns if c.startswith("metric_")]
    latest = (
        df.filter(pl.col("split") == split)
        .sort("step")
        .group_by("model")
        .agg([pl.col("step").max(), *[pl.col(c).last() for c in names]])
    )
    return latest.sort("model")


# -- charts --------------------------------------------------------------------------------------

_ORANGE, _DARK_ORANGE, _GREY, _REFERENCE = "#e67a30", "#c05a20", "#e0dcd5", "dimgray"


def _figure() -> Any:
    try:
        from matplotlib.figure import Figure
    except ImportError as error:
        raise MissingExtraError("matplotlib", "cli") from error
    return Figure(figsize=(6, 4), dpi=300)


def _chart_frame(
    df: pl.DataFrame, metric_name: str, models: Sequence[str | BenchmarkModelKey] | None
) -> tuple[pl.DataFrame, str, list[str], dict[str, int]]:
    """The rows to chart, the metric's column, the models in drawing order (as given, else
    the trained ones then the single-step ones, each alphabetically) and each one's count of
    distinct steps."""
    import polars as pl

    column = metric_name if metric_name in df.columns else f"metric_{metric_name}"
    if column not in df.columns:
        raise InvalidInputError(
            f"Column {column!r} not found in DataFrame. Available columns: {list(df.columns)}"
        )
    if models is not None:
        keys = [m if isinstance(m, BenchmarkModelKey) else BenchmarkModelKey(m) for m in models]
        df = filter_rename_model_split(df, keys)
    if df.is_empty():
        raise InvalidInputError(
            "no rows left to chart after choosing the models and splits; check `models`"
        )
    counts = df.group_by("model").agg(pl.col("step").n_unique()).rows()
    steps = {str(model): int(n) for model, n in counts}
    if models is not None:
        order = [key.display_name for key in keys]
    else:
        order = sorted(m for m, n in steps.items() if n > 1) + sorted(
            m for m, n in steps.items() if n == 1
        )
    return df, column, order, steps


def training_progress_chart(
    df: pl.DataFrame,
    metric_name: str,
    models: list[str | BenchmarkModelKey] | None = None,
    title: str | None = None,
    x_label: str | None = None,
    y_label: str | None = None,
    perfect_score: float | None = None,
    legend_loc: str | None = "lower right",
) -> Any:
    """A line per trained model: `metric_name` (a column, or `metric_{name}`) averaged per
    step, over the steps of a `load_trajectories` frame; a model with one step (a prompted
    baseline) as a dashed horizontal line across the steps (dotted when another baseline has
    the same score). `perfect_score` draws a labelled reference line. Returns the matplotlib
    Figure (shown inline in a notebook; `fig.savefig(path)` to keep it); pyplot's global
    state is not touched."""
    import polars as pl

    df, column, order, steps = _chart_frame(df, metric_name, models)
    means = df.group_by(["model", "step"]).agg(pl.col(column).mean()).sort("step")
    first, last = means["step"].min(), means["step"].max()
    trained = [m for m in order if steps.get(m, 2) > 1]
    baselines = [m for m in order if steps.get(m, 1) == 1]
    fig = _figure()
    ax = fig.subplots()
    if perfect_score is not None:
        ax.plot([first, last], [perfect_score, perfect_score], linewidth=1,
                color=_REFERENCE, label="_nolegend_")  # fmt: skip
        low, high = ax.get_ylim()
        ax.text(first, perfect_score - (high - low) * 0.1, "Perfect score",
                verticalalignment="top", color=_REFERENCE)  # fmt: skip
    # the first colours of matplotlib's cycle go to the trained models
    color_of = {model: f"C{i}" for i, model in enumerate(trained + baselines)}
    drawn: set[float] = set()
    for model in baselines + trained:  # the trained lines are drawn over the baselines
        rows = means.filter(pl.col("model") == model)
        x, y = rows["step"].to_list(), rows[column].to_list()
        if len(x) == 1:
            style = ":" if y[0] in drawn else "--"
            drawn.add(y[0])
            ax.plot([first, last], [y[0], y[0]], linestyle=style, linewidth=2,
                    color=color_of[model], label=model)  # fmt: skip
        else:
            ax.plot(x, y, marker="o", linewidth=2, color=color_of[model], label=model)
    ax.set_title(metric_name if title is None else title)
    ax.set_xlabel("Step" if x_label is None else x_label)
    if y_label is not None:
        ax.set_ylabel(y_label)
    handles = dict(zip(*reversed(ax.get_legend_handles_labels()), strict=True))
    ax.legend([handles[m] for m in trained + baselines], trained + baselines,
              loc=legend_loc, frameon=True, facecolor="white")  # fmt: skip
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    fig.tight_layout(pad=1.0)
    return fig


def percentage_comparison_bar_chart(
    df: pl.DataFrame,
    metric_name: str,
    models: list[str | BenchmarkModelKey] | None = None,
    title: str | None = None,
    y_label: str | None = None,
    perfect_score: float | None = None,
    num_decimals: int = 0,
) -> Any:
    """A bar per model: `metric_name` averaged at its first step, with the change by its last
    step stacked on top (hatched, labelled "RL +x") for a trained model; one plain bar for a
    single-step baseline. Values up to 1.01 are shown as percentages. Returns the Figure."""
    import polars as pl

    df, column, order, _ = _chart_frame(df, metric_name, models)
    means = df.group_by(["model", "step"]).agg(pl.col(column).mean()).sort(["model", "step"])
    bars: list[tuple[str, float, float]] = []
    for model in order:
        values = means.filter(pl.col("model") == model)[column].to_list()
        if values:
            base = float(values[0])
            bars.append((model, base, float(values[-1]) - base if len(values) > 1 else 0.0))
    if not bars:
        raise InvalidInputError("no values to chart for the models asked for")
    top = max(base + change for _, base, change in bars)
    scale, unit = (100.0, "%") if top <= 1.01 else (1.0, "")
    fig = _figure()
    ax = fig.subplots()
    for x, (_, base, change) in enumerate(bars):
        base, change = base * scale, change * scale
        ax.bar(x, base, width=0.7, color=_ORANGE if change else _GREY, edgecolor="white")
        if change:
            ax.bar(x, change, width=0.7, bottom=base, color=_ORANGE, hatch="///",
                   edgecolor="white", alpha=0.95)  # fmt: skip
            ax.text(x, base + change / 2, f"RL +{change:.{num_decimals}f}{unit}", ha="center",
                    va="center", color=_DARK_ORANGE, fontweight="bold",
                    bbox={"facecolor": "white", "boxstyle": "round,pad=0.3", "alpha": 0.95,
                          "edgecolor": _ORANGE, "linewidth": 1})  # fmt: skip
        ax.text(x, base + change + top * scale * 0.02, f"{base + change:.{num_decimals}f}{unit}",
                ha="center", va="bottom", fontweight="bold")  # fmt: skip
    if perfect_score is not None:
        line = perfect_score * scale
        ax.plot([-0.5, len(bars) - 0.5], [line, line], linewidth=1, color=_REFERENCE,
                label="_nolegend_")  # fmt: skip
        ax.text(-0.4, line - top * scale * 0.05, "Perfect score", va="top", ha="left",
                color=_REFERENCE)  # fmt: skip
    ax.set_xticks(range(len(bars)), [model for model, _, _ in bars])
    ax.set_yticks([])
    if y_label is not None:
        ax.set_ylabel(y_label)
    ax.set_title(metric_name if title is None else title, pad=15)
    for side in ("left", "top", "right"):
        ax.spines[side].set_visible(False)
    return fig


# -- a baseline on wandb -------------------------------------------------------------------------


async def log_constant_metrics_wandb(
    model: Model,
    num_steps: int,
    split_metrics: Mapping[str, Mapping[str, float]],
    logged_run_name: str | None = None,
) -> None:
    """A wandb run (under the model's `entity` and `project`, named `logged_run_name` or the
    model's run name) that logs the same `{split}/{metric}` values at every step from 0 to
    `num_steps`: a baseline drawn as flat lines beside the training curves. The run's files go
    to the model's folder, as its own wandb mirror's do (`WANDB_DIR` when set); the mode is
    wandb's own (`WANDB_MODE`, or online when logged in). Bad values are refused before
    anything is sent."""
    values: dict[str, float] = {}
    if isinstance(num_steps, bool) or not isinstance(num_steps, int) or num_steps < 0:
        raise InvalidInputError(f"num_steps must be an integer >= 0, not {num_steps!r}")
    for split, metrics in split_metrics.items():
        for key, value in metrics.items():
            number = (
                value if isinstance(value, int | float) and not isinstance(value, bool) else None
            )
            if number is None or not math.isfinite(number):
                raise InvalidInputError(f"{split}/{key} must be a finite number, not {value!r}")
            values[f"{validate_name(split, 'split')}/{key}"] = float(number)
    try:
        import wandb
    except ImportError as error:
        raise MissingExtraError("wandb", "wandb") from error
    directory = os.environ.get("WANDB_DIR") or str(RunLayout.of(model.base_path, model.run).dir)

    def log() -> None:
        Path(directory).mkdir(parents=True, exist_ok=True)
        run = wandb.init(
            entity=getattr(model, "entity", None), project=model.project,
            name=logged_run_name or model.run.name, dir=directory, reinit="create_new",
        )  # fmt: skip
        try:
            for step in range(num_steps + 1):
                run.log(values, step=step)
        finally:
            run.finish()

    await asyncio.to_thread(log)


# -- a model's trajectories from its backup bucket ----------------------------------------------


async def pull_model_trajectories(model: Model) -> None:
    """Copy `model`'s run folder from the bucket named by `$BACKUP_BUCKET` (ART's key layout,
    `s3://{bucket}/{project}/models/{run}/`) into its `base_path`, without its checkpoints and
    logs: what the loaders above read. A missing variable is refused before anything moves."""
    from ..utils.s3 import BUCKET_ENV, pull_model_from_s3

    bucket = os.environ.get(BUCKET_ENV)
    if not bucket:
        raise InvalidInputError(
            f"pull_model_trajectories needs ${BUCKET_ENV}, the bucket the model was pushed to"
        )
    name = model.run.name
    print(f"Pulling trajectories for model {name!r} from S3 bucket {bucket!r}…", flush=True)
    await pull_model_from_s3(
        name, model.project, s3_bucket=bucket, art_path=model.base_path,
        exclude=["checkpoints", "logs"],
    )  # fmt: skip
    print("Finished pulling trajectories.", flush=True)
