"""`arthex prune`: the retention decision over a run's checkpoints, deleting only with `--yes`.

The decision is `model.delete_checkpoints`'s: `decide` from `arthex.core.retention`, fed the
best step by the policies' per-step means (ledger.py) and the newest complete checkpoint.
What it deletes is what the LocalBackend would (`checkpoints.unkept`: every step folder but
the kept steps and the latest), deleted by the LocalBackend's own `delete_steps`. With
`--yes`, prune holds the run's trainer lease from its decision to its last deletion, so it
never deletes under a live trainer on this host (which may be using a step the files don't
show), and no trainer starts while it works.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import typer

from ...adapters.layout import parse_run_dir, run_label
from ...core.retention import Direction, decide
from .checkpoints import disk_use, require_local
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
    from ...adapters.local import checkpoints as ckpt

    with one_line_errors():
        if dry_run and yes:
            raise UsageError(BOTH)
        check_direction(direction)
        path = resolve_model(model, base_path, project, name, guess=False)
        require_local(path)  # a run whose checkpoints are elsewhere is refused before any lease
    with one_line_errors(), _lease(path) if yes else contextlib.nullcontext():
        found = require_local(path)
        ledger = Ledger.required(path)
        latest = found.latest
        assert latest is not None
        sense: Direction = "max" if direction == "max" else "min"
        pinned = set(pin or ())
        decision = decide(
            ledger.best_step(metric, sense),
            latest=latest,
            metric=metric,
            direction=sense,
            keep_last=keep_last,
            pinned=pinned,
        )
        if decision is None:
            logged = ", ".join(k for k in ledger.metric_keys() if k.endswith(("reward", "loss")))
            hint = f"pass --metric, one of: {logged}" if logged else "no reward or loss is logged"
            raise UsageError(
                f"{metric!r} was never logged for {run_label(path)}, so the best checkpoint is "
                f"unknown: nothing deleted; {hint}"
            )
        doomed = ckpt.unkept(path, decision.keep)
        folders = sorted({*found.steps, *ckpt.step_folders(path)})
        sizes = {step: disk_use(ckpt.step_dir(path, step)) for step in folders}
        deleted = ckpt.delete_steps(path, doomed) if yes else []
    out = console()
    loose = len(folders) - len(found.steps)
    extra = f" and {loose} incomplete folder(s)" if loose else ""
    out.print(f"{run_label(path)}: {len(found.steps)} checkpoint(s){extra}, latest {latest}")
    means = ledger.step_means(metric)

    def fate(step: int) -> str:
        if step not in found.steps:
            return "delete (incomplete)" if step in doomed else "keep (incomplete)"
        if step in doomed:
            return "delete"
        why = [
            reason
            for reason, applies in (
                ("latest", step == latest),
                (f"best {direction}", step == decision.best_step),
                (f"last {keep_last}", keep_last > 1 and latest - keep_last < step < latest),
                ("pinned", step in pinned),
            )
            if applies
        ]
        return "keep (" + ", ".join(why) + ")"

    rows = [[str(step), fmt(means.get(step)), size(sizes[step]), fate(step)] for step in folders]
    columns = [Column("step"), Column(metric), Column("size"), Column("", "left")]
    print_table(out, columns, rows)
    freed = size(sum(sizes[s] for s in doomed))
    if not doomed:
        out.print("nothing to delete")
    elif not yes:
        out.print(
            f"dry run: would delete {len(doomed)} checkpoint(s) ({freed}): "
            f"{abbreviate(doomed)}; run again with --yes to delete them"
        )
    else:
        out.print(f"deleted {len(deleted)} checkpoint(s) ({freed}): {abbreviate(deleted)}")


@contextlib.contextmanager
def _lease(path: Path) -> Iterator[None]:
    """Hold the run's trainer lease from the decision to the last deletion, so no trainer
    starts in between; a live trainer holding it refuses prune (RunBusyError)."""
    parsed = parse_run_dir(path)
    if parsed is None:  # outside the standard layout no trainer can hold a lease on it
        yield
        return
    from ...adapters.run_files.lease import FileRunLeases

    lease = FileRunLeases(str(parsed[0])).acquire_now(parsed[1])
    try:
        yield
    finally:
        lease.release_now()
