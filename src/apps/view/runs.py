"""The viewer's summary of a run: its history's extent and best step, its checkpoints, its
splits, its base model, and who holds its trainer lease (`current_holder`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ...adapters.layout import (
    LEASE,
    MODEL_SPEC,
    TRAJECTORIES,
)
from ...adapters.parquet.store import list_parts
from ...core.errors import ArthexError
from .catalog import DEFAULT_METRICS, Catalog, Run, json_file
from .checkpoints import checkpoint_steps
from .history import history_of


def run_summary(catalog: Catalog, run: Run, metric: str | None, direction: str) -> dict[str, Any]:
    errors: list[str] = []
    cache = history_of(catalog, run)
    with cache.lock:
        errors.extend(cache.errors)
        last_step, updated, keys, rows = (
            cache.last_step,
            cache.updated,
            list(cache.keys),
            len(cache.rows),
        )
        best = None
        for key in [metric] if metric else list(DEFAULT_METRICS):
            at = cache.best(key, direction)
            if at is not None:
                value = cache.index.step_means(key)[at]
                best = {"metric": key, "direction": direction, "step": at, "value": value}
                break
    found = checkpoint_steps(run, errors)
    step = found["latest"] if found["latest"] is not None else last_step
    spec = json_file(run, MODEL_SPEC, errors)
    return {
        "project": run.ref.project,
        "name": run.ref.name,
        "path": run.root.location(run.dir),
        "step": step,
        "updated": None if updated is None else updated.isoformat(),
        "rows": rows,
        "keys": keys,
        "best": best,
        "checkpoints": len(found["steps"]),
        "checkpoints_where": found["where"],
        "checkpoints_expired": len(found.get("expired", [])),
        "lease": lease(run),
        "splits": splits(run, errors),
        "base_model": spec.get("base_model") if spec else None,
        "errors": errors,
    }


def lease(run: Run) -> dict[str, Any] | None:
    """Who the trainer lease names, and whether that process is alive on this host.

    The lock is never tried (even a shared one would make a starting trainer's take fail);
    the holder's pid is checked instead, which is what can be known without touching it."""
    if not run.root.local:
        return None
    from ...adapters.run_files.lease import current_holder

    holder = current_holder(Path(run.file(LEASE)))
    if holder is None:
        return None
    alive: bool | None = None
    if holder.host == _hostname():
        try:
            os.kill(holder.pid, 0)
            alive = True
        except (ProcessLookupError, OverflowError, ValueError):  # gone, or no pid at all
            alive = False
        except PermissionError:
            alive = True
    return {"holder": holder.describe(), "pid": holder.pid, "host": holder.host, "alive": alive}


def _hostname() -> str:
    import socket

    return socket.gethostname()


def splits(run: Run, errors: list[str] | None = None) -> dict[str, list[int]]:
    """Every split with its logged steps, as the store lists them."""
    try:
        parts = list_parts(run.root.filesystem, run.file(TRAJECTORIES))
    except (OSError, ArthexError) as error:
        if errors is not None:
            errors.append(f"{run.root.location(run.file(TRAJECTORIES))}: {error}")
        return {}
    found: dict[str, set[int]] = {}
    for part in parts:
        found.setdefault(part.split, set()).add(part.step)
    return {split: sorted(steps) for split, steps in sorted(found.items())}
