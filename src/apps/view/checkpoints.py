"""The viewer's checkpoints of a run: the LocalBackend's `complete_steps`, the Tinker record,
the retention rule (`retention.decide`) fed by `HistoryIndex`/`BestStep` as
`delete_checkpoints` is; and the pipeline record (`PipelineRecord.from_json`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...adapters.files import disk_use
from ...adapters.layout import (
    CHECKPOINTS,
    PIPELINE_STATE,
    TINKER_RUN,
    is_step_name,
)
from ...core.errors import ArthexError
from ...core.pipeline_record import DISCARD_REASONS, PipelineRecord
from ...core.retention import decide
from .catalog import DEFAULT_METRICS, BadRequest, Catalog, Run, json_file
from .history import history_of


def checkpoint_steps(run: Run, errors: list[str]) -> dict[str, Any]:
    """{"where", "steps", "latest", "incomplete"} (and "expired" for a Tinker run: steps the
    service expired, not errors): complete checkpoints as the backend counts."""
    root = run.root
    if root.local:
        directory = Path(run.dir)
        if (directory / TINKER_RUN).is_file():
            from ...adapters.tinker.record import read_record

            try:
                record = read_record(directory)
            except ArthexError as error:
                errors.append(str(error).splitlines()[0])
                record = None
            if record is not None:
                return {
                    "where": "tinker",
                    "steps": record.sampler_steps(),
                    "latest": record.step,
                    "incomplete": [],
                    "expired": list(record.expired),
                }
        from ...adapters.local import checkpoints as ckpt

        steps = ckpt.complete_steps(directory)
        loose = [s for s in ckpt.step_folders(directory) if s not in steps]
        return {
            "where": "run" if steps else "none",
            "steps": steps,
            "latest": steps[-1] if steps else None,
            "incomplete": loose,
        }
    names = [n for n in root.children(run.file(CHECKPOINTS)) if is_step_name(n)]
    steps = sorted(int(n) for n in names)
    return {
        "where": "run" if steps else "none",
        "steps": steps,
        "latest": steps[-1] if steps else None,
        "incomplete": [],
    }


def checkpoints(
    catalog: Catalog, run: Run, metric: str | None, direction: str, keep_last: int
) -> dict[str, Any]:
    if direction not in ("max", "min"):
        raise BadRequest(f"direction must be max or min, got {direction!r}")
    if keep_last < 1:
        raise BadRequest(f"keep_last must be >= 1, got {keep_last}")
    errors: list[str] = []
    found = checkpoint_steps(run, errors)
    cache = history_of(catalog, run)
    with cache.lock:
        errors.extend(cache.errors)
        chosen, best = metric, None
        for key in [metric] if metric else list(DEFAULT_METRICS):
            best = cache.best(key, direction)
            if best is not None:
                chosen = key
                break
        means = cache.index.step_means(chosen) if chosen else {}
    latest = found["latest"]
    decision = None
    if latest is not None:
        decision = decide(
            best,
            latest=latest,
            metric=chosen or DEFAULT_METRICS[0],
            direction="min" if direction == "min" else "max",
            keep_last=keep_last,
        )
    rows = []
    for step in found["steps"]:
        why = []
        if step == latest:
            why.append("latest")
        if latest is not None and latest - keep_last < step < latest:
            why.append(f"last {keep_last}")
        if step == best:
            why.append(f"best {chosen}")
        entry: dict[str, Any] = {
            "step": step,
            "metric": means.get(step),
            "kept": decision is None or step in decision.keep,
            "why": why,
        }
        if run.root.local and found["where"] == "run":
            entry["bytes"] = disk_use(Path(run.dir) / CHECKPOINTS / f"{step:04d}")
        rows.append(entry)
    for step in found.get("expired", []):
        rows.append({"step": step, "metric": means.get(step), "expired": True, "why": []})
    rows.sort(key=lambda row: int(row["step"]))
    return {
        "checkpoints": rows,
        "where": found["where"],
        "incomplete": found["incomplete"],
        "metric": chosen,
        "direction": direction,
        "best_step": best,
        "retention": None if decision is None else decision.reason,
        "pipeline": pipeline(run, errors),
        "errors": errors,
    }


def pipeline(run: Run, errors: list[str]) -> dict[str, Any] | None:
    data = json_file(run, PIPELINE_STATE, errors)
    if data is None:
        return None
    where = run.root.location(run.file(PIPELINE_STATE))
    try:
        record = PipelineRecord.from_json(data, where=where)
    except ArthexError as error:
        errors.append(str(error).splitlines()[0])
        return None
    return {
        "step": record.step,
        "offset": record.offset,
        "trained_groups": record.trained_groups,
        "pending": len(record.pending),
        "discarded": {r: record.discarded_count(r) for r in DISCARD_REASONS},
        "in_flight": None if record.in_flight is None else record.in_flight.step,
        "last_eval_step": record.last_eval_step,
        "best_eval": None if record.best_eval is None else list(record.best_eval),
        "totals": dict(record.totals),
    }
