"""The viewer's readers, by what they read; each reads the files the library writes and
never writes back: where runs live (`catalog`), their ledger (`history`), their summary
(`runs`), their checkpoints and pipeline record (`checkpoints`), their trajectories
(`trajectories`)."""

from __future__ import annotations

from .catalog import BadRequest, Catalog, NotFound, encode
from .checkpoints import checkpoints
from .history import history_rows
from .runs import run_summary
from .trajectories import trajectories

__all__ = [
    "BadRequest",
    "Catalog",
    "NotFound",
    "checkpoints",
    "encode",
    "history_rows",
    "run_summary",
    "trajectories",
]
