"""`arthex prune`: the retention decision over a run's checkpoints, deleting only with `--yes`.

prune opens the run and calls the use case a script calls, `core.pruning.delete_checkpoints`
(what `model.delete_checkpoints` runs): the best step comes from `BestStep` over the ledger's
per-step means (ledger.py), and the run's checkpoints are the port's `CheckpointFiles` over
its directory (`adapters/local/checkpoints.RunCheckpoints`: the LocalBackend's own folder
logic, deleting every step folder but the kept ones and the latest). With `--yes`, prune
holds the run's trainer lease, as a registered model does, from its decision to its last
deletion, so it never deletes under a live trainer on this host (which may be using a step
the files don't show), and no trainer starts while it works.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Collection
from pathlib import Path

import attrs
import typer

from ...adapters.files import disk_use
from ...adapters.layout import parse_run_dir, run_label
from ...core.identity import RunRef
from ...core.pruning import delete_checkpoints
from ...core.retention import Direction, RetentionDecision
from .checkpoints import Stored, require_local
from .common import (
    BASE_PATH_OPT,
    DIRECTION_OPT,
    NAME_OPT,
    ONLY_ONE,
    PROJECT_OPT,
    UsageError,
    abbreviate,
    check_direction,
    console,
    fmt,
    model_argument,
    one_line_errors,
    resolve_model,
    size,
)
from .ledger import Ledger
from .tables import Column, print_table

BOTH = (
    "--dry-run and --yes contradict each other: pass --yes to delete, or leave it out to only "
    "see the decision"
)


def prune(
    model: str | None = model_argument(ONLY_ONE),
    base_path: Path = BASE_PATH_OPT,
    project: str | None = PROJECT_OPT,
    name: str | None = NAME_OPT,
    metric: str = typer.Option(
        "val/reward", metavar="KEY", help="The history key whose per-step mean picks the best step."
    ),
    direction: str = DIRECTION_OPT,
    keep_last: int = typer.Option(
        1, min=1, metavar="N", help="Keep this many most recent steps (the latest always)."
    ),
    pin: list[int] | None = typer.Option(
        None, "--pin", metavar="STEP", help="Also keep this step (repeat for more)."
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Only show the decision (what happens without --yes)."
    ),
    yes: bool = typer.Option(False, "--yes", help="Delete the checkpoints the decision drops."),
) -> None:
    """Delete the checkpoints a run no longer needs (with --yes).

    Without --yes it only shows the decision.

    Keeps the latest step, the last --keep-last steps, the best step by --metric and pinned
    steps; nothing is deleted when the metric was never logged. Works on runs that keep their
    checkpoints in the run directory (arthex's and ART's LocalBackend)."""
    with one_line_errors():
        if dry_run and yes:
            raise UsageError(BOTH)
        check_direction(direction)
        path = resolve_model(model, base_path, project, name, guess=False)
        require_local(path)  # a run whose checkpoints are elsewhere is refused before any lease
        sense: Direction = "max" if direction == "max" else "min"
        pinned = set(pin or ())
        done = asyncio.run(_prune(path, metric, sense, keep_last, pinned, delete=yes))
    _show(done, metric, direction, keep_last, pinned, deleting=yes)


@attrs.frozen
class _Pruned:
    """What prune found, decided and did, for the table."""

    path: Path
    found: Stored
    ledger: Ledger
    folders: list[int]  # every step folder, complete or not, before any deletion
    sizes: dict[int, int]
    decision: RetentionDecision


async def _prune(
    path: Path,
    metric: str,
    direction: Direction,
    keep_last: int,
    pinned: Collection[int],
    *,
    delete: bool,
) -> _Pruned:
    from ...adapters.local import checkpoints as ckpt

    base, run = _run_of(path)
    async with _lease(base, run) if delete else contextlib.nullcontext():
        found = require_local(path)
        ledger = Ledger.required(path)
        folders = sorted({*found.steps, *ckpt.step_folders(path)})
        sizes = {step: disk_use(ckpt.step_dir(path, step)) for step in folders}
        decision = await delete_checkpoints(
            ckpt.RunCheckpoints(path, run),
            run,
            ledger.best_step(metric, direction),
            metric=metric,
            direction=direction,
            keep_last=keep_last,
            pinned=pinned,
            dry_run=not delete,
        )
    if decision.best_step is None:
        logged = ", ".join(k for k in ledger.metric_keys() if k.endswith(("reward", "loss")))
        hint = f"pass --metric, one of: {logged}" if logged else "no reward or loss is logged"
        raise UsageError(
            f"{metric!r} was never logged for {run_label(path)}, so the best checkpoint is "
            f"unknown: nothing deleted; {hint}"
        )
    return _Pruned(path, found, ledger, folders, sizes, decision)


def _show(
    done: _Pruned,
    metric: str,
    direction: str,
    keep_last: int,
    pinned: Collection[int],
    *,
    deleting: bool,
) -> None:
    found, decision = done.found, done.decision
    latest = found.latest
    assert latest is not None

    def reasons(step: int) -> list[str]:
        return [
            reason
            for reason, applies in (
                ("latest", step == latest),
                (f"best {direction}", step == decision.best_step),
                (f"last {keep_last}", keep_last > 1 and latest - keep_last < step < latest),
                ("pinned", step in pinned),
            )
            if applies
        ]

    incomplete = [step for step in done.folders if step not in found.steps]
    if deleting:
        doomed = list(decision.deleted)
    else:  # the dry run names checkpoints; deleting also takes the incomplete folders unkept
        doomed = sorted({*decision.deleted, *(s for s in incomplete if not reasons(s))})

    def fate(step: int) -> str:
        if step in incomplete:
            return "delete (incomplete)" if step in doomed else "keep (incomplete)"
        if step in doomed:
            return "delete"
        return "keep (" + ", ".join(reasons(step)) + ")"

    out = console()
    extra = f" and {len(incomplete)} incomplete folder(s)" if incomplete else ""
    out.print(f"{run_label(done.path)}: {len(found.steps)} checkpoint(s){extra}, latest {latest}")
    means = done.ledger.step_means(metric)
    rows = [
        [str(step), fmt(means.get(step)), size(done.sizes[step]), fate(step)]
        for step in done.folders
    ]
    columns = [Column("step"), Column(metric), Column("size"), Column("", "left")]
    print_table(out, columns, rows)
    freed = size(sum(done.sizes[s] for s in doomed if s in done.sizes))
    if not doomed:
        out.print("nothing to delete")
    elif not deleting:
        out.print(
            f"dry run: would delete {len(doomed)} checkpoint(s) ({freed}): "
            f"{abbreviate(doomed)}; run again with --yes to delete them"
        )
    else:
        out.print(f"deleted {len(doomed)} checkpoint(s) ({freed}): {abbreviate(doomed)}")


def _run_of(path: Path) -> tuple[Path | None, RunRef]:
    """The run's base path and name in the standard layout; outside it, no base (no trainer
    can hold a lease there) and the run named after its folders."""
    parsed = parse_run_dir(path)
    if parsed is not None:
        return parsed
    try:
        return None, RunRef(project=path.parent.name or "run", name=path.name or "run")
    except ValueError:
        return None, RunRef(project="run", name="run")


@contextlib.asynccontextmanager
async def _lease(base: Path | None, run: RunRef) -> AsyncIterator[None]:
    """Hold the run's trainer lease (the RunLeases port, as a registered model holds it) from
    the decision to the last deletion, so no trainer starts in between; a live trainer
    holding it refuses prune (RunBusyError naming it)."""
    if base is None:
        yield
        return
    from ...composition import container

    lease = await container.file_run_leases(str(base)).acquire(run, registered_at="arthex prune")
    try:
        yield
    finally:
        await lease.release()
