"""Which of this process's trainable models hold a run lease, and on which backend.

ART's scripts end with `backend.close()` and never call `model.close()`, and a notebook
re-runs the cell that builds the model and the backend without closing anything. Either way
the run's lease comes back:

- `backend.close()` calls `release_leases(backend)`: the models registered on that backend
  give their leases back (a model registered again takes its lease again);
- a model garbage-collected without `close` gives its lease back from a finalizer
  (`weakref.finalize`, holding the lease, never the model);
- a model that finds its run leased by another model of this very process first collects
  garbage once (a dropped model caught in a reference cycle is then finalized) and tries
  again: only a model still reachable keeps the run, and the refusal says where it was
  registered.

The book holds models and backends weakly: it never keeps either alive.
"""

from __future__ import annotations

import gc
import sys
import weakref
from pathlib import Path
from types import FrameType
from typing import Protocol

from .identity import RunRef


class LeaseOwner(Protocol):
    """A model that may hold its run's lease (core's TrainableModel)."""

    @property
    def run(self) -> RunRef: ...

    async def release_lease_from(self, backend: object) -> None:
        """Give the lease back if this model is registered on `backend`."""
        ...


_ON_BACKEND: weakref.WeakKeyDictionary[object, weakref.WeakSet[LeaseOwner]] = (
    weakref.WeakKeyDictionary()
)
_HOLDERS: weakref.WeakSet[LeaseOwner] = weakref.WeakSet()


def holds(owner: LeaseOwner, backend: object) -> None:
    """`owner` holds its run's lease and is registered on `backend`."""
    _HOLDERS.add(owner)
    try:
        _ON_BACKEND.setdefault(backend, weakref.WeakSet()).add(owner)
    except TypeError:  # a backend that cannot be referenced weakly: its close cannot free it
        pass


def let_go(owner: LeaseOwner) -> None:
    """`owner` gave its lease back."""
    _HOLDERS.discard(owner)


async def release_leases(backend: object) -> None:
    """Give back the run leases of the models registered on `backend`. Every backend's
    `close` calls this (a backend of your own should too), so closing the backend frees its
    runs for the next model, in this process or another, as `model.close()` would."""
    try:
        owners = _ON_BACKEND.pop(backend, None)
    except TypeError:
        return
    failed: BaseException | None = None
    for owner in list(owners or ()):  # each is released, even when another one fails
        try:
            await owner.release_lease_from(backend)
        except Exception as error:
            failed = failed or error
    if failed is not None:
        raise failed


def collect_if_held_here(run: RunRef) -> bool:
    """The run's lease is held by a model of this process: collect garbage (finalizing any
    such model nothing refers to any more) and say whether one was; only then is trying
    again worth it."""
    if not any(owner.run == run for owner in list(_HOLDERS)):
        return False
    gc.collect()
    return True


_PACKAGE = (
    str(Path(__file__).parents[1]) + "/",
    str(Path(__file__).resolve().parents[1]) + "/",
)


def caller_site() -> str:
    """`file:line` of the first frame outside arthex's own code: where the user called
    `register` (a notebook cell shows as its pseudo-file)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(_PACKAGE) and "asyncio" not in Path(filename).parts:
            return f"{filename}:{frame.f_lineno}"
        frame = frame.f_back
    return "an unknown place"
