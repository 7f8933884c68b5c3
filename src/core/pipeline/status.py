"""What a PipelineTrainer shows while it trains, as the synchronous loop's `model.train` does.

On a terminal (stderr a TTY): one progress line, advanced by each update, holding the step,
the batch's mean reward, the loss, the groups discarded and the queue's depth. Elsewhere (a
log file, a job's output): the same summary as one log line (logger "arthex", INFO) per
update, at most one every `log_interval_seconds` (ART's name and default, 60 s); an update
whose line was held back by the interval is logged when the run ends, so the last state is
always there.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from typing import TextIO

from ..errors import InvalidInputError
from ..progress import ProgressLine

logger = logging.getLogger("arthex")

DISCARD_KEYS = ("stale", "zero_variance", "errored")


def check_interval(value: object) -> float:
    """`log_interval_seconds`, checked: a finite number > 0."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise InvalidInputError(f"log_interval_seconds must be a number > 0, got {value!r}")
    return float(value)


def step_summary(step: int, trained: int, metrics: Mapping[str, float | None]) -> str:
    """`step 3 reward=0.42 loss=0.0173 trained=4 discarded=1 (stale 1) queue=2`: the update
    that made `step` from `trained` groups, `metrics` its row and the batch's summary."""
    parts = [f"step {step}"]
    reward = metrics.get("train/reward")
    if reward is not None:
        parts.append(f"reward={reward:.3g}")
    loss = metrics.get("loss/train")
    if loss is not None:
        parts.append(f"loss={loss:.4g}")
    parts.append(f"trained={trained}")
    counts = {r: int(metrics.get(f"discarded/step/{r}_groups") or 0) for r in DISCARD_KEYS}
    total = sum(counts.values())
    detail = ", ".join(f"{r.replace('_', '-')} {n}" for r, n in counts.items() if n)
    parts.append(f"discarded={total}" + (f" ({detail})" if detail else ""))
    depth = metrics.get("queue/groups_depth")
    if depth is not None:
        parts.append(f"queue={int(depth)}")
    return " ".join(parts)


class PipelineStatus:
    """A progress line on a terminal, else rate-limited log lines; see the module doc."""

    def __init__(
        self,
        description: str,
        *,
        total: int | None,
        log_interval_seconds: float,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._line = ProgressLine(description, total, stream=stream)
        self._description = description
        self._interval = log_interval_seconds
        self._clock = clock
        self._logged_at: float | None = None
        self._held: str | None = None

    @property
    def on_terminal(self) -> bool:
        return self._line.enabled

    def update_done(self, step: int, trained: int, metrics: Mapping[str, float | None]) -> None:
        """Show the update that made `step` from `trained` groups (`metrics`: its row)."""
        summary = step_summary(step, trained, metrics)
        if self.on_terminal:
            self._line.advance(note=summary)
            return
        line = f"{self._description} {self._line.done + 1}"
        total = self._line.total
        self._line.advance()
        line += f"/{total}: {summary}" if total is not None else f": {summary}"
        now = self._clock()
        if self._logged_at is not None and now - self._logged_at < self._interval:
            self._held = line
            return
        self._logged_at = now
        self._held = None
        logger.info("%s", line)

    def close(self) -> None:
        """End the line on a terminal; elsewhere log the last update if it was held back."""
        self._line.close()
        held, self._held = self._held, None
        if held is not None:
            logger.info("%s", held)
