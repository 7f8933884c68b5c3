"""`delete_checkpoints`, the use case: the retention decision (`retention.decide`) over a
run's checkpoints, applied through the backend port. `TrainableModel.delete_checkpoints` and
`arthex prune` both call it, so a script and the command decide and delete alike."""

from __future__ import annotations

from collections.abc import Collection

import attrs

from ..ports.training_backend import CheckpointFiles
from .identity import RunRef
from .retention import Direction, RetentionDecision, decide


async def delete_checkpoints(
    checkpoints: CheckpointFiles,
    run: RunRef,
    best: int | None,
    *,
    metric: str,
    direction: Direction = "max",
    keep_last: int = 1,
    pinned: Collection[int] = (),
    dry_run: bool = False,
) -> RetentionDecision:
    """Keep the latest `keep_last` steps, `best` (the best step by `metric` in `direction`,
    as `BestStep` finds it in the ledger) and the pinned steps; delete the other checkpoints,
    or with `dry_run` only say which (`deleted`). When the metric was never logged (`best` is
    None) nothing is deleted: the decision keeps every checkpoint, `best_step` None, and says
    why."""
    latest = await checkpoints.get_step(run)
    existing = await checkpoints.checkpoint_steps(run)
    decision = decide(
        best,
        latest=latest,
        metric=metric,
        direction=direction,
        keep_last=keep_last,
        pinned=pinned,
    )
    if decision is None:
        return RetentionDecision(
            keep=frozenset(existing),
            best_step=None,
            metric=metric,
            reason=f"{metric!r} was never logged for {run}, so the best checkpoint is unknown: "
            "nothing deleted",
            dry_run=dry_run,
        )
    remaining = frozenset(s for s in existing if s in decision.keep)
    if dry_run:
        doomed = tuple(s for s in existing if s not in decision.keep)
        return attrs.evolve(decision, keep=remaining, deleted=doomed, dry_run=True)
    deleted = await checkpoints.delete_checkpoint_files(run, decision.keep)
    return attrs.evolve(decision, keep=remaining - set(deleted), deleted=tuple(sorted(deleted)))
