"""Which checkpoints a model has on S3, as ART's `art.utils.s3_checkpoint_utils` asks, by
listing keys (pyarrow's S3 filesystem, no `aws` command): `.../models/{name}/checkpoints/
{step:04d}/` counts as a step only when it holds a whole checkpoint (arthex's rule,
`adapters/local/checkpoints.py`: `trainer_state.json`, or ART's two adapter files), so a push
still in flight or a half-deleted folder is never picked.

ART answers None when the listing fails; arthex says why (S3SyncError, one line naming the
key): a store that is down is not a model without checkpoints.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from ..adapters.layout import CHECKPOINTS, is_step_name
from ..adapters.local.checkpoints import whole_checkpoint
from ..adapters.parquet.retrying import DEFAULT_RETRY_BUDGET, check_budget
from ..adapters.tree_sync import Entry, Tree, list_tree, remove_tree, sync_tree
from .s3 import build_s3_path, tree

if TYPE_CHECKING:
    import pyarrow.fs as pafs

__all__ = [
    "get_checkpoint_step_not_after_from_s3",
    "get_latest_checkpoint_step_from_s3",
    "migrate_s3_checkpoints_to_new_structure",
    "whole_steps",
]


def whole_steps(files: dict[str, Entry] | set[str]) -> list[int]:
    """The steps with a whole checkpoint among files listed below a `checkpoints` folder
    (`{step}/{file}`), ascending."""
    held: dict[str, set[str]] = {}
    for path in files:
        folder, _, rest = path.partition("/")
        if is_step_name(folder) and rest and "/" not in rest:
            held.setdefault(folder, set()).add(rest)
    return sorted(int(folder) for folder, names in held.items() if whole_checkpoint(names))


async def _steps(
    model_name: str,
    project: str,
    s3_bucket: str | None,
    prefix: str | None,
    filesystem: pafs.FileSystem | None,
    retry_budget: float,
) -> list[int]:
    base = build_s3_path(model_name=model_name, project=project, s3_bucket=s3_bucket, prefix=prefix)
    budget = check_budget(retry_budget)
    files = await asyncio.to_thread(list_tree, tree(f"{base}/{CHECKPOINTS}", filesystem), budget)
    return whole_steps(files)


async def get_latest_checkpoint_step_from_s3(
    model_name: str,
    project: str,
    s3_bucket: str | None = None,
    prefix: str | None = None,
    *,
    filesystem: pafs.FileSystem | None = None,
    retry_budget: float = DEFAULT_RETRY_BUDGET,
) -> int | None:
    """The newest step with a whole checkpoint on S3, None when there is none."""
    steps = await _steps(model_name, project, s3_bucket, prefix, filesystem, retry_budget)
    return steps[-1] if steps else None


async def get_checkpoint_step_not_after_from_s3(
    model_name: str,
    project: str,
    not_after_step: int,
    s3_bucket: str | None = None,
    prefix: str | None = None,
    *,
    filesystem: pafs.FileSystem | None = None,
    retry_budget: float = DEFAULT_RETRY_BUDGET,
) -> int | None:
    """The newest step <= `not_after_step` with a whole checkpoint on S3, else None."""
    steps = await _steps(model_name, project, s3_bucket, prefix, filesystem, retry_budget)
    kept = [step for step in steps if step <= not_after_step]
    return kept[-1] if kept else None


async def migrate_s3_checkpoints_to_new_structure(
    model_name: str,
    project: str,
    s3_bucket: str | None = None,
    prefix: str | None = None,
    dry_run: bool = False,
    *,
    filesystem: pafs.FileSystem | None = None,
    retry_budget: float = DEFAULT_RETRY_BUDGET,
) -> None:
    """Move checkpoints of ART's first layout, `.../models/{name}/{step:04d}/`, to
    `.../models/{name}/checkpoints/{step:04d}/`, printing what it does (`dry_run`: only what
    it would do). A step already in the new place is left as it is, in both places; a step is
    deleted from the old place only once every file of it is in the new one."""
    base = build_s3_path(model_name=model_name, project=project, s3_bucket=s3_bucket, prefix=prefix)
    budget = check_budget(retry_budget)
    root = tree(base, filesystem)
    files = await asyncio.to_thread(list_tree, root, budget)
    old = sorted({p.split("/", 1)[0] for p in files if "/" in p})
    old = [name for name in old if is_step_name(name) and len(name) == 4]
    if not old:
        print(f"No checkpoints in the old layout under {base}")
        return
    print(f"Found {len(old)} checkpoint(s) to migrate under {base}: {', '.join(old)}")
    moved = 0
    for name in old:
        source = Tree(root.join(name), root.filesystem)
        target = Tree(root.join(f"{CHECKPOINTS}/{name}"), root.filesystem)
        if dry_run:
            print(f"  would move {source.label()}/ to {target.label()}/")
            continue
        if any(p.startswith(f"{CHECKPOINTS}/{name}/") for p in files):
            print(f"  {target.label()}/ exists already: {name} left in both places")
            continue
        await asyncio.to_thread(sync_tree, source, target, budget=budget)
        copied = await asyncio.to_thread(list_tree, target, budget)
        wanted = {p[len(name) + 1 :] for p in files if p.startswith(f"{name}/")}
        if not wanted <= set(copied):
            print(f"  {name}: not every file reached {target.label()}/; the old copy is kept")
            continue
        await asyncio.to_thread(remove_tree, source, budget)
        moved += 1
        print(f"  moved {name}")
    if not dry_run:
        print(f"Migrated {moved} checkpoint(s)")
