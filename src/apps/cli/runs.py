"""`arthex runs`: every model under a base path, with its step, best metric, checkpoints and
disk use. Checkpoints are counted as the backend counts them (checkpoints.py)."""

from __future__ import annotations

from pathlib import Path

from ...adapters.files import disk_use
from ...adapters.layout import find_runs, run_label
from ...core.retention import Direction
from .checkpoints import Stored, stored
from .common import (
    BASE_PATH_OPT,
    DIRECTION_OPT,
    UsageError,
    check_direction,
    console,
    fmt,
    local_time,
    no_models,
    one_line_errors,
    option,
    size,
    view_hint,
)
from .ledger import Ledger
from .server_runs import server_runs
from .tables import Column, print_table

COLUMNS = (
    Column("model", "left"),
    Column("step"),
    Column("best", "left"),
    Column("checkpoints"),
    Column("disk"),
    Column("updated", "left"),
)


def runs(
    base_path: Path = BASE_PATH_OPT,
    metric: str | None = option(
        "KEY", "The metric for 'best'. Default: val/reward, else train/reward.", shown=False
    ),
    direction: str = DIRECTION_OPT,
) -> None:
    """List the models under --base-path: step, best, disk use.

    Also the best metric and the number of checkpoints.

    The step is the newest complete checkpoint, else the newest history step; a Tinker run's
    checkpoints, kept on the service, are counted from its tinker-run.json."""
    with one_line_errors():
        check_direction(direction)
        if not base_path.is_dir():
            raise UsageError(f"{base_path} is not a directory; pass --base-path where runs live")
        sense: Direction = "max" if direction == "max" else "min"
        server = server_runs(base_path)  # a training server's state: runs under opaque ids
        root, labels = server if server is not None else (base_path, {})
        rows = [run_row(path, metric, sense, label=labels.get(path)) for path in find_runs(root)]
    out = console()
    if not rows:
        out.print(no_models(base_path))
        return
    out.print(f"{len(rows)} model(s) under {base_path}")
    print_table(out, COLUMNS, rows)
    view_hint(root)  # a server's runs live under its backend folder: point the viewer there


def run_row(
    path: Path, metric: str | None, direction: Direction, *, label: str | None = None
) -> list[str]:
    ledger = Ledger.of(path)
    checkpoints = stored(path)
    step = checkpoints.latest if checkpoints.latest is not None else ledger.last_step()
    best = ""
    for key in [metric] if metric else ["val/reward", "train/reward"]:
        at = ledger.best_step(key, direction)
        if at is not None:
            best = f"{key} {fmt(ledger.step_means(key)[at])} @ {at}"
            break
    newest = ledger.newest_time()
    count = str(len(checkpoints.steps))
    return [
        label or run_label(path),
        "" if step is None else str(step),
        best,
        _where(count, checkpoints),
        size(disk_use(path)),
        "" if newest is None else local_time(newest, "%Y-%m-%d %H:%M"),
    ]


def _where(count: str, checkpoints: Stored) -> str:
    if checkpoints.where != "tinker":
        return count
    expired = f", {len(checkpoints.expired)} expired" if checkpoints.expired else ""
    return f"{count} (tinker{expired})"
