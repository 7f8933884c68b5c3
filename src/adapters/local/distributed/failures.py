"""What a rank failure says: which rank is to blame, and its last words.

When one rank dies the others usually fail a moment later, in a collective that lost its peer,
so every rank that failed has a story. The culprit is, in order: a rank killed by a signal; a
rank that raised an error of its own; a rank that exited without a report; a rank on another
machine that stopped answering; a rank that only saw a peer vanish. Ties go to the earlier.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Sequence
from pathlib import Path

import attrs

from ....core.errors import BackendError
from .world import World


@attrs.frozen
class RankFailure:
    rank: int
    what: str
    last_error: str
    log: Path | None

    def error(self, size: int) -> BackendError:
        where = f"; its log: {self.log}" if self.log is not None else ""
        last = f": {self.last_error}" if self.last_error else ""
        return BackendError(
            f"trainer rank {self.rank} of {size} {self.what}{last}. Every rank has been stopped; "
            "the run keeps its newest complete checkpoint, and the next train call starts the "
            f"ranks again from it{where}"
        )


@attrs.define
class Evidence:
    """One rank's side of a failure, with how much it is to blame (lower: more)."""

    blame: int
    when: float
    failure: RankFailure


def culprit(evidence: Sequence[Evidence]) -> RankFailure:
    return min(evidence, key=lambda e: (e.blame, e.when, e.failure.rank)).failure


def never_joined(late: list[int], world: World, port: int) -> RankFailure:
    return RankFailure(
        late[0],
        f"(with ranks {late}) never joined within {world.join_timeout_s:.0f} s",
        f"start them on the other machines with MASTER_ADDR={world.master_addr} "
        f"MASTER_PORT={port} WORLD_SIZE={world.size} RANK=<rank> "
        "python -m arthex.adapters.local.distributed.worker",
        None,
    )


def signal_text(number: int) -> str:
    try:
        name = signal.Signals(number).name
    except ValueError:
        name = f"signal {number}"
    text = f"was killed by {name}"
    if number == signal.SIGKILL:
        text += " (the kernel's out-of-memory killer also ends processes this way: see dmesg)"
    return text


def log_tail(log: Path, lines: int = 3) -> str:
    """The last lines a rank wrote (its last error, or what it was doing)."""
    try:
        with open(log, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 8192))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    kept = [line.strip() for line in text.replace("\r", "\n").splitlines() if line.strip()]
    return " | ".join(kept[-lines:])[-600:]
