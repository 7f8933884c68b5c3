"""A run folder's checkpoints, as ART's `art.local.checkpoints` names the helpers, on arthex's
rules (`adapters/local/checkpoints.py`): a checkpoint is `{run}/checkpoints/{step:04d}` and
counts once it is whole; a folder is deleted by renaming it away first, so a crash never
leaves half of one that still looks whole."""

from __future__ import annotations

import logging
import os
from collections.abc import Collection
from pathlib import Path

from ..adapters.layout import CHECKPOINTS, is_step_name
from ..adapters.local.checkpoints import delete_steps, latest_step, step_folders
from ..core.errors import InvalidInputError

__all__ = [
    "delete_checkpoints",
    "get_last_checkpoint_dir",
    "migrate_checkpoints_to_new_structure",
]

logger = logging.getLogger("arthex")


def delete_checkpoints(output_dir: str, excluding: Collection[int]) -> None:
    """Delete every checkpoint folder of the run folder `output_dir` but the steps in
    `excluding` (whole or not: a half-written folder is deleted too)."""
    kept = set(excluding)
    if any(isinstance(s, bool) or not isinstance(s, int) for s in kept):
        raise InvalidInputError(f"excluding must hold step numbers, got {sorted(kept, key=str)}")
    model_dir = Path(output_dir)
    doomed = [step for step in step_folders(model_dir) if step not in kept]
    for step in delete_steps(model_dir, doomed):
        logger.info("deleted checkpoint %s", model_dir / CHECKPOINTS / f"{step:04d}")


def get_last_checkpoint_dir(output_dir: str) -> str | None:
    """`{output_dir}/checkpoints/{step:04d}` of the newest whole checkpoint, None if none."""
    step = latest_step(Path(output_dir))
    return None if step is None else os.path.join(output_dir, CHECKPOINTS, f"{step:04d}")


def migrate_checkpoints_to_new_structure(output_dir: str) -> None:
    """Move checkpoints of ART's first layout, `{output_dir}/{step}/`, to
    `{output_dir}/checkpoints/{step}/` (one rename each); a step already there is left in both
    places. Creates nothing when there is nothing to move."""
    root = Path(output_dir)
    if not root.is_dir():
        return
    old = sorted(p for p in root.iterdir() if p.is_dir() and is_step_name(p.name))
    moved = 0
    for folder in old:
        target = root / CHECKPOINTS / folder.name
        if target.exists():
            logger.warning("checkpoint %s is in both layouts; %s is left as it is", target, folder)
            continue
        target.parent.mkdir(exist_ok=True)
        os.rename(folder, target)
        moved += 1
    if moved:
        logger.info("moved %d checkpoint(s) of %s to %s/", moved, root, CHECKPOINTS)
