"""`arthex prune` and `arthex runs`: a run's checkpoints, through the backends' own code.

Where a run keeps its checkpoints decides what these commands can do:

- in the run directory, `checkpoints/NNNN/` (arthex's LocalBackend, and ART's LocalBackend,
  whose folders hold a LoRA adapter): listed, counted and deleted by
  `arthex.adapters.local.checkpoints`, the code the LocalBackend runs. Only complete
  checkpoints count (a state file, or ART's adapter files); a deleted folder is first renamed
  out of the step namespace and the directory fsynced, so a crash never leaves half a
  checkpoint that looks whole.
- on the Tinker service, mapped by `tinker-run.json`: `runs` counts those with sampler
  weights and takes the step from that record, as the TinkerBackend does;
  `prune` refuses and names the call that can delete them (`model.delete_checkpoints()` on a
  TinkerBackend).
- on a training server (ServerlessBackend): nothing in the run directory says so; `prune`
  finds no checkpoints and says where they may be.

`prune` calls the use case `model.delete_checkpoints` calls (`arthex.core.pruning`) on
`RunCheckpoints`, the run directory's checkpoints as the backend port's `CheckpointFiles`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import attrs

from ...adapters.layout import CHECKPOINTS, TINKER_RUN, run_label
from .common import UsageError

Where = Literal["run", "tinker", "none"]


@attrs.frozen
class Stored:
    """A run's complete checkpoints and where they live."""

    where: Where
    steps: tuple[int, ...] = ()
    latest: int | None = None  # the run's step, as its backend's get_step says
    expired: tuple[int, ...] = ()  # steps the Tinker service expired (a TTL), not errors


def stored(path: Path) -> Stored:
    if (path / TINKER_RUN).is_file():
        from ...adapters.tinker.record import read_record

        record = read_record(path)
        if record is None:  # removed since the look above
            return Stored("none")
        return Stored("tinker", tuple(record.sampler_steps()), record.step, record.expired)
    from ...adapters.local import checkpoints as ckpt

    steps = tuple(ckpt.complete_steps(path))
    return Stored("run" if steps else "none", steps, steps[-1] if steps else None)


def require_local(path: Path) -> Stored:
    """The run's checkpoints, when they are in its directory; UsageError naming where they
    are (or may be) otherwise."""
    found = stored(path)
    label = run_label(path)
    if found.where == "tinker":
        raise UsageError(
            f"{label} is a Tinker run: its checkpoints live on the Tinker service (listed in "
            f"{path / TINKER_RUN}), not in the run directory; delete them with "
            "model.delete_checkpoints() on a TinkerBackend"
        )
    if found.where == "none":
        from ...adapters.local import checkpoints as ckpt

        loose = ckpt.step_folders(path)
        what = f" (only incomplete folders: {loose})" if loose else ""
        raise UsageError(
            f"{label} has no complete checkpoints in {path / CHECKPOINTS}{what}; a run trained "
            "through a training server keeps them there: use model.delete_checkpoints()"
        )
    return found
