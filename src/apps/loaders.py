"""Load a run for analysis: trajectories as a polars LazyFrame, the history as a DataFrame.

Both take a model directory (`{base_path}/{project}/models/{name}`) or an `arthex.Model`, and
read the files arthex (and ART) write there, so a notebook can look at a run while it trains:

    import polars as pl
    import arthex

    history = arthex.load_history(".art/my-project/models/agent-001")
    rewards = (
        arthex.load_trajectories(".art/my-project/models/agent-001", split="train")
        .group_by("step").agg(pl.col("reward").mean())
        .sort("step").collect()
    )

Only the part files' footers are read up front (to refuse a layout version this arthex does
not know); rows are read when the frame is collected, so selecting a few columns of thousands
of parts reads only those columns.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..adapters.layout import HISTORY, TRAJECTORIES, RunLayout, find_runs, is_run_dir
from ..core.errors import CorruptDataError, InvalidInputError

if TYPE_CHECKING:
    import polars as pl
    import pyarrow.fs as pafs

    from ..core.model import Model

__all__ = [
    "HISTORY_FILE",
    "list_parts",
    "load_history",
    "load_trajectories",
    "model_dir",
]

HISTORY_FILE = HISTORY
_VERSION_KEY = "art.trajectory_parquet.version"
_FORMAT_VERSION = "2"


def model_dir(path_or_model: str | os.PathLike[str] | Model) -> Path:
    """The model directory of a path or a Model, checked to be one.

    A directory counts as a model directory when it holds at least one of `history.jsonl`,
    `model.json`, `trajectories/` or `checkpoints/`; anything else is refused with a message
    that says what was expected (and which models sit below it, for a base path given by
    mistake).
    """
    # A Model can only exist once its module is imported; looking it up instead of importing
    # it keeps a path-only call from paying for the core's imports (openai's types).
    core_model = sys.modules.get("arthex.core.model")
    if core_model is not None and isinstance(path_or_model, core_model.Model):
        model: Model = path_or_model
        return RunLayout.of(model.base_path, model.run).dir
    if not isinstance(path_or_model, str | os.PathLike):
        raise InvalidInputError(
            "expected a model directory path or an arthex.Model, got "
            f"{type(path_or_model).__name__}: {path_or_model!r:.100}"
        )
    path = Path(path_or_model)
    if not path.is_dir():
        raise InvalidInputError(
            f"{str(path)!r} is not a directory; pass a model directory such as "
            "'.art/{project}/models/{name}'"
        )
    if not is_run_dir(path):
        below = [str(p.relative_to(path)) for p in find_runs(path)]
        hint = f"; models below it: {', '.join(below[:5])}" if below else ""
        raise InvalidInputError(
            f"{str(path)!r} is not a model directory (no history.jsonl, model.json, "
            f"trajectories/ or checkpoints/ in it){hint}"
        )
    return path


# --- trajectories -----------------------------------------------------------------------------


def list_parts(
    directory: Path,
    split: str | Iterable[str] | None = None,
    steps: int | Iterable[int] | None = None,
) -> list[tuple[str, int, int, Path]]:
    """(split, step, part, path) of every part file of a model directory, sorted: the step
    files, and legacy `-N` parts not yet folded into theirs.

    Files being written (temp names), names the trajectory store does not write and legacy
    parts already folded are skipped, so every group is listed once and a part appears whole
    or not at all (the store's own listing rules)."""
    import pyarrow.fs as pafs

    from ..adapters.parquet.store import list_parts as store_parts

    found = store_parts(pafs.LocalFileSystem(), str(directory / TRAJECTORIES), split, steps)
    return [(p.split, p.step, p.part, Path(p.path)) for p in found]


def load_trajectories(
    path_or_model: str | os.PathLike[str] | Model,
    split: str | Iterable[str] | None = None,
    steps: int | Iterable[int] | None = None,
    *,
    filesystem: pafs.FileSystem | None = None,
) -> pl.LazyFrame:
    """Every trajectory row of a model as one polars LazyFrame, with `split`, `step` and `part`.

    The columns are ART's v2 trajectory parquet layout (`reward`, `metrics`, `metadata`,
    `messages`, `trajectory_json`, ...; JSON columns are strings, decode them with
    `pl.col("metrics").str.json_decode()`) plus `split` (String), `step` (Int64) and `part`
    (Int64: 0 for the step file `0003.parquet`, which holds every write at that step; n for a
    legacy `0003-n.parquet`, an extra write by an earlier arthex, until the next write there
    folds it into the step file).
    A group in which every rollout failed is one row with a null `trajectory_index` and
    `reward`; filter them with `pl.col("trajectory_index").is_not_null()`.

    `split` and `steps` (one value or several) choose which parts are read at all. Rows come
    in (split, step, part) order, and within a part in the order they were written.

    Raises InvalidInputError for a path that is not a model directory, and CorruptDataError
    (naming the file) for a part that is not ART v2 trajectory parquet.
    """
    import polars as pl

    remote = _remote_model_dir(path_or_model, filesystem)
    if remote is not None:
        return _load_remote(*remote, split, steps)
    directory = model_dir(path_or_model)
    parts = list_parts(directory, split, steps)
    if not parts:
        return _empty_trajectories().lazy()
    for _, _, _, path in parts:
        _check_version(path)
    frame = pl.scan_parquet(
        [str(path) for *_, path in parts],
        schema=_trajectory_schema(),
        missing_columns="insert",
        extra_columns="ignore",
        include_file_paths="__arthex_part_path",
    )
    pattern = r"([^/\\]+)[/\\]([0-9]+)(?:-([0-9]+))?\.parquet$"
    location = pl.col("__arthex_part_path").str.extract_groups(pattern)
    return frame.with_columns(
        location.struct.field("1").alias("split"),
        location.struct.field("2").cast(pl.Int64).alias("step"),
        location.struct.field("3").cast(pl.Int64).fill_null(0).alias("part"),
    ).drop("__arthex_part_path")


def _remote_model_dir(
    path_or_model: str | os.PathLike[str] | Model, filesystem: pafs.FileSystem | None
) -> tuple[pafs.FileSystem, str] | None:
    """(filesystem, model dir) when the model lives on a filesystem URI (`s3://...`) or an
    explicit pyarrow filesystem; None for a local model directory."""
    core_model = sys.modules.get("arthex.core.model")
    if core_model is not None and isinstance(path_or_model, core_model.Model):
        model: Model = path_or_model
        root = RunLayout.of(model.base_path, model.run).uri
    elif isinstance(path_or_model, str | os.PathLike):
        root = os.fspath(path_or_model)
    else:
        return None
    if filesystem is None and "://" not in root:
        return None
    from ..adapters.parquet.store import resolve_root

    return resolve_root(root, filesystem)


def _load_remote(
    filesystem: pafs.FileSystem,
    directory: str,
    split: str | Iterable[str] | None,
    steps: int | Iterable[int] | None,
) -> pl.LazyFrame:
    import polars as pl
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    from ..adapters.parquet.schema import SCHEMA
    from ..adapters.parquet.store import list_parts as store_parts

    parts = store_parts(filesystem, f"{directory}/trajectories", split, steps)
    if not parts:
        return _empty_trajectories().lazy()
    frames = []
    for part in parts:
        metadata = pq.read_schema(part.path, filesystem=filesystem).metadata or {}
        version = metadata.get(_VERSION_KEY.encode())
        if version != _FORMAT_VERSION.encode():
            raise CorruptDataError(
                f"{part.path} is not ART v2 trajectory parquet ({_VERSION_KEY!r} is {version!r})"
            )
        dataset = ds.dataset(part.path, filesystem=filesystem, format="parquet", schema=SCHEMA)
        frames.append(
            pl.scan_pyarrow_dataset(dataset).with_columns(
                pl.lit(part.split).alias("split"),
                pl.lit(part.step, pl.Int64).alias("step"),
                pl.lit(part.part, pl.Int64).alias("part"),
            )
        )
    return pl.concat(frames)


def _check_version(path: Path) -> None:
    import polars as pl

    try:
        metadata = pl.read_parquet_metadata(path)
    except Exception as error:  # polars raises its own ComputeError/OSError family
        raise CorruptDataError(f"{path} cannot be read as parquet: {error}") from error
    version = metadata.get(_VERSION_KEY)
    if version != _FORMAT_VERSION:
        found = "no version" if version is None else f"version {version!r}"
        raise CorruptDataError(
            f"{path} has {found} in {_VERSION_KEY!r}; only ART v2 trajectory parquet "
            f"(version {_FORMAT_VERSION}) is read: move the file out of the split or upgrade"
        )


def _trajectory_schema() -> dict[str, Any]:
    import polars as pl

    message = pl.Struct(
        {
            "role": pl.String,
            "content": pl.String,
            "tool_calls": pl.String,
            "tool_call_id": pl.String,
            "trainable": pl.Boolean,
        }
    )
    return {
        "format_version": pl.Int16,
        "group_index": pl.Int64,
        "trajectory_index": pl.Int64,
        "group_json": pl.String,
        "trajectory_json": pl.String,
        "group_metadata": pl.String,
        "group_metrics": pl.String,
        "group_logs": pl.List(pl.String),
        "reward": pl.Float64,
        "metrics": pl.String,
        "metadata": pl.String,
        "tools": pl.String,
        "logs": pl.List(pl.String),
        "messages": pl.List(message),
    }


def _empty_trajectories() -> pl.DataFrame:
    import polars as pl

    schema = {**_trajectory_schema(), "split": pl.String, "step": pl.Int64, "part": pl.Int64}
    return pl.DataFrame(schema=schema)


# --- history ----------------------------------------------------------------------------------


def load_history(path_or_model: str | os.PathLike[str] | Model) -> pl.DataFrame:
    """The model's history.jsonl as a DataFrame: one row per ledger row, in append order.

    Columns: `step` (Int64), `recorded_at` (Datetime, UTC; ART's naive times are local time,
    converted with this machine's time zone), then every metric key that appears
    in any row, in order of first appearance, as Float64 (null where a row lacks the key or
    logged a non-finite value). Every row's keys are collected before the frame is built, so
    a metric that first appears late in a long run is never lost to schema inference. Rows at
    the same step are kept separately (e.g. a train row and a val row); aggregate with
    `.group_by("step").mean()`.

    The file is read with arthex's own ledger reader (a shared lock, a torn last line left out,
    ART's `Infinity` read as null), so it is safe to call while a run is writing. A model
    without a history gives an empty frame with the two fixed columns.
    """
    import polars as pl

    from ..adapters.jsonl_history import read_rows

    rows = read_rows(model_dir(path_or_model) / HISTORY_FILE)
    keys: dict[str, None] = {}
    for row in rows:
        keys.update(dict.fromkeys(row.values))
    columns: dict[str, list[Any]] = {
        "step": [row.step for row in rows],
        "recorded_at": [row.recorded_at for row in rows],
    }
    for key in keys:
        columns[key] = [row.values.get(key) for row in rows]
    schema: dict[str, Any] = {"step": pl.Int64, "recorded_at": pl.Datetime("us", "UTC")}
    schema.update(dict.fromkeys(keys, pl.Float64))
    return pl.DataFrame(columns, schema=schema)
