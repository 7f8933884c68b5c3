"""`arthex history`: the last rows of a model's history, as a table, CSV or JSON lines."""

from __future__ import annotations

from collections.abc import Sequence
from fnmatch import fnmatchcase
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from ...adapters.layout import HISTORY, run_label
from .common import (
    BASE_PATH_OPT,
    MODEL_ARG,
    NAME_OPT,
    PROJECT_OPT,
    UsageError,
    console,
    fmt,
    local_time,
    one_line_errors,
    resolve_model,
    view_hint,
)
from .ledger import Ledger
from .tables import Column, print_table

if TYPE_CHECKING:
    import polars as pl

DEFAULT_HISTORY_KEYS = (
    "*/reward",
    "*/reward_std_dev",
    "*/exception_rate",
    "loss/train",
    "loss/grad_norm",
)


def choose_keys(available: Sequence[str], patterns: Sequence[str]) -> list[str]:
    """Keys matching the patterns (exact names or shell globs such as `val/*`), in the
    patterns' order; UsageError naming a pattern that matches nothing."""
    chosen: list[str] = []
    for pattern in patterns:
        matched = [key for key in available if fnmatchcase(key, pattern)]
        if not matched:
            close = [key for key in available if pattern.split("/")[-1] in key][:6]
            hint = f" (similar: {', '.join(close)})" if close else ""
            raise UsageError(f"no history key matches {pattern!r}{hint}; see --keys '*'")
        chosen.extend(key for key in matched if key not in chosen)
    return chosen


def _split_patterns(keys: Sequence[str] | None) -> list[str]:
    return [part.strip() for item in keys or () for part in item.split(",") if part.strip()]


def _metric_keys(history: pl.DataFrame) -> list[str]:
    return [key for key in history.columns if key not in ("step", "recorded_at")]


def one_row_per_step(frame: pl.DataFrame, keys: Sequence[str]) -> pl.DataFrame:
    """The rows of `frame` (its `step` and `keys`) joined per step: a step's train batch, its
    evaluations and the training metrics of the update that made it are one row, since their
    keys differ (each carries its split or namespace). A key a step already has (the same
    split evaluated twice at one step) starts another row for that step; `recorded_at` is the
    latest of the joined rows'."""
    import polars as pl

    merged: list[dict[str, object]] = []
    last_of: dict[int, dict[str, object]] = {}
    for row in frame.select(["step", *keys]).iter_rows(named=True):
        values = {k: row[k] for k in keys if row[k] is not None}
        into = last_of.get(row["step"])
        if into is None or (values.keys() - {"recorded_at"}) & into.keys():
            into = {"step": row["step"]}
            merged.append(into)
            last_of[row["step"]] = into
        into.update(values)
    schema = frame.select(["step", *keys]).schema
    return pl.DataFrame([{k: r.get(k) for k in schema} for r in merged], schema=schema)


def history(
    model: str | None = MODEL_ARG,
    base_path: Path = BASE_PATH_OPT,
    project: str | None = PROJECT_OPT,
    name: str | None = NAME_OPT,
    last: int = typer.Option(
        20, "--last", "-n", min=1, metavar="N", help="How many steps to show."
    ),
    keys: list[str] | None = typer.Option(
        None,
        "--keys",
        "-k",
        metavar="KEYS",
        help="Columns to show: names or globs (`val/*`), comma-separated or repeated. "
        "`recorded_at` is a key too. Default: rewards, std devs, exception rates, losses.",
    ),
    output: str = typer.Option(
        "table", "--format", metavar="table|csv|json", help="table, csv or json (JSON lines)."
    ),
) -> None:
    """Show a model's history as a table, one row per step.

    A step's train batch, evaluations and training metrics share its row; steps that have
    none of the chosen keys are skipped. Below the table, each step whose
    update took no gradient step (nothing to train) is named, with what its batch held."""
    import polars as pl

    from ..loaders import load_history

    with one_line_errors():
        if output not in ("table", "csv", "json"):
            raise UsageError(f"--format must be table, csv or json, got {output!r}")
        path = resolve_model(model, base_path, project, name)
        frame = load_history(path)
        if frame.height == 0:
            raise UsageError(f"model {run_label(path)} has no history yet ({path / HISTORY})")
        available = [*_metric_keys(frame), "recorded_at"]
        patterns = _split_patterns(keys)
        if patterns:
            chosen = choose_keys(available, patterns)
        else:
            chosen = [k for k in available if any(fnmatchcase(k, p) for p in DEFAULT_HISTORY_KEYS)]
            chosen = chosen or _metric_keys(frame)[:6]
        metrics = [k for k in chosen if k != "recorded_at"]
        if metrics:
            frame = frame.filter(pl.any_horizontal(pl.col(metrics).is_not_null()))
        frame = one_row_per_step(frame, chosen)
        total = frame.height
        shown = frame.tail(last)
    if output == "csv":
        typer.echo(shown.write_csv(), nl=False)
        return
    if output == "json":
        typer.echo(shown.write_ndjson(), nl=False)
        return
    out = console()
    out.print(f"{run_label(path)}: {_count(shown, total)}")
    columns = [Column("step", "right")]
    columns += [Column(k, "left" if k == "recorded_at" else "right") for k in chosen]
    rows = [
        [str(row["step"])]
        + [local_time(row[k]) if k == "recorded_at" else fmt(row[k]) for k in chosen]
        for row in shown.iter_rows(named=True)
    ]
    print_table(out, columns, rows)
    if "loss/train" in chosen and shown.height:
        low, high = shown["step"].min(), shown["step"].max()
        for step, why in sorted(Ledger.of(path).nothing_trained().items()):
            if low <= step <= high:  # type: ignore[operator]
                # the row at `step` is the batch trained next; the note is about the one before
                note = f"step {step}: no gradient step: {why.format(batch=step - 1)}"
                out.print(note, soft_wrap=True)
    view_hint(path)


def _count(shown: pl.DataFrame, total: int) -> str:
    """What the table holds, in its own unit: steps, or rows when a step has two (a split
    evaluated twice at one step)."""
    one_each = shown["step"].n_unique() == shown.height
    unit = "steps" if one_each else "rows (one per step and split)"
    if shown.height == total:
        return f"all {total} {unit}"
    return f"the last {shown.height} of {total} {unit}"
