"""The scenario stream, read once, with every scenario numbered by its position.

A resumed pipeline must meet the same scenarios at the same positions, so the stream given to a
resumed run must yield the same sequence (a list, a seeded generator, a dataset read in a fixed
order); this is also what ART's pipeline assumes. `start` skips what the record says was taken
and keeps, on the way, the scenarios it must sample again (pending ones), which `next` returns
before reading on.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator, Collection, Iterable, Iterator
from typing import Any, Generic, TypeVar

from ..errors import InvalidInputError

S = TypeVar("S")
logger = logging.getLogger("arthex")


class ScenarioStream(Generic[S]):
    def __init__(self, scenarios: Iterable[S] | AsyncIterable[S]) -> None:
        if isinstance(scenarios, AsyncIterable):
            self._async: AsyncIterator[S] | None = aiter(scenarios)
            self._sync: Iterator[S] | None = None
        elif isinstance(scenarios, Iterable) and not isinstance(scenarios, str | bytes | dict):
            self._async, self._sync = None, iter(scenarios)
        else:
            raise InvalidInputError(
                f"scenarios must be an iterable or async iterable of scenarios, got "
                f"{type(scenarios).__name__}"
            )
        self._replay: deque[tuple[int, S]] = deque()
        self._lock = asyncio.Lock()
        self.position = 0
        self.exhausted = False

    async def start(self, offset: int, replay: Collection[int]) -> None:
        """Skip the first `offset` scenarios, keeping those whose index is in `replay`."""
        wanted = set(replay)
        while self.position < offset:
            found, scenario = await self._read()
            if not found:
                break
            if self.position in wanted:
                self._replay.append((self.position, scenario))
            self.position += 1
        missing = sorted(wanted - {index for index, _ in self._replay})
        if missing:
            raise InvalidInputError(
                f"the scenario stream ended after {self.position} scenarios, but the pipeline "
                f"record says scenarios {missing[:5]} were taken and not yet trained: a resumed "
                "run needs the same scenario stream (resume=False starts over)"
            )
        if self.position < offset:
            logger.warning(
                "the scenario stream ended after %d scenarios; the record had taken %d",
                self.position,
                offset,
            )

    async def next(self) -> tuple[int, S] | None:
        """The next scenario and its index: replayed ones first; None at the end."""
        async with self._lock:
            if self._replay:
                return self._replay.popleft()
            if self.exhausted:
                return None
            found, scenario = await self._read()
            if not found:
                self.exhausted = True
                return None
            index = self.position
            self.position += 1
            return index, scenario

    @property
    def replaying(self) -> int:
        return len(self._replay)

    async def _read(self) -> tuple[bool, Any]:
        if self._async is not None:
            try:
                return True, await anext(self._async)
            except StopAsyncIteration:
                return False, None
        assert self._sync is not None
        try:
            return True, next(self._sync)
        except StopIteration:
            return False, None
