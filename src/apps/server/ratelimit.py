"""Per-key request rate limiting: one token bucket per API key.

A bucket holds up to `burst` tokens and refills at `rate` tokens a second; each request
takes one. An empty bucket answers how long until the next token, which the Guard sends as
`Retry-After` (whole seconds, rounded up, at least 1, as HTTP wants). Buckets exist only for
keys that authenticated, so their number is bounded by the key ring, not by what clients
send. The clock is a parameter so the policy is tested without waiting.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable

__all__ = ["TokenBuckets"]


class TokenBuckets:
    def __init__(
        self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate = rate
        self.burst = burst
        self.clock = clock
        self._buckets: dict[Hashable, tuple[float, float]] = {}  # key -> (tokens, at)

    @property
    def enabled(self) -> bool:
        return self.rate > 0

    def take(self, key: Hashable) -> float:
        """Take a token for `key`: 0.0 when granted, else the seconds until one is due."""
        if not self.enabled:
            return 0.0
        now = self.clock()
        tokens, at = self._buckets.get(key, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - at) * self.rate)
        if tokens >= 1.0:
            self._buckets[key] = (tokens - 1.0, now)
            return 0.0
        self._buckets[key] = (tokens, now)
        return (1.0 - tokens) / self.rate

    @staticmethod
    def retry_after(wait_s: float) -> str:
        """The Retry-After header's value for a wait."""
        return str(max(1, math.ceil(wait_s)))
