"""A mutual-exclusion lock for coroutines that is bound to no event loop.

`asyncio.Lock` binds itself to the first loop on which it is contended and raises on any
other, so an object that outlives one `asyncio.run` (a backend used by a script's second
`asyncio.run`) cannot keep one. `LoopFreeLock` keeps its state under a thread lock and wakes
each waiter on the waiter's own loop, so any loop may take it, one after another or at once.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from types import TracebackType

import attrs


@attrs.define(eq=False)
class _Waiter:
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[None]
    granted: bool = False


class LoopFreeLock:
    """`async with lock:` on whichever loop is running; waiters are served first come."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._held = False
        self._waiters: deque[_Waiter] = deque()

    def locked(self) -> bool:
        return self._held

    async def acquire(self) -> bool:
        loop = asyncio.get_running_loop()
        with self._mutex:
            if not self._held and not self._waiters:
                self._held = True
                return True
            waiter = _Waiter(loop, loop.create_future())
            self._waiters.append(waiter)
        try:
            await waiter.future
        except BaseException:  # cancelled while waiting: pass the lock on if it was ours
            with self._mutex:
                ours = waiter.granted
                if not ours:
                    self._waiters.remove(waiter)
            if ours:
                self.release()
            raise
        return True

    def release(self) -> None:
        with self._mutex:
            if not self._held:
                raise RuntimeError("LoopFreeLock.release() on a lock that is not held")
            while self._waiters:
                waiter = self._waiters.popleft()
                try:  # the lock passes to the waiter still held: no one can slip in between
                    waiter.loop.call_soon_threadsafe(_wake, waiter.future)
                except RuntimeError:
                    continue  # its loop is closed: that waiter waits no more
                waiter.granted = True
                return
            self._held = False

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():  # a cancelled waiter releases what it was handed (see acquire)
        future.set_result(None)
