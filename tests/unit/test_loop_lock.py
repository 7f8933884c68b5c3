"""The run-state lock of LocalBackend outlives an event loop: contended under one
`asyncio.run`, then under a second, it excludes on both (an `asyncio.Lock` raises on the
second, being bound to the first)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import attrs
import pytest

from arthex.adapters.local.backend import _Run
from arthex.utils.loop_lock import LoopFreeLock


def run_state_lock() -> Any:
    """A new run state's lock, as LocalBackend makes it."""
    factory: Any = attrs.fields(_Run).lock.default
    return factory.factory()


async def contend(lock: Any, order: list[str], tag: str) -> None:
    """Two holders; the second asks while the first holds, so it must wait its turn."""

    async def hold(name: str) -> None:
        async with lock:
            order.append(f"{tag}{name}+")
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            order.append(f"{tag}{name}-")

    await asyncio.gather(hold("a"), hold("b"))


def test_the_run_state_lock_is_contended_on_one_loop_then_another() -> None:
    lock = run_state_lock()
    order: list[str] = []
    asyncio.run(contend(lock, order, "1"))
    asyncio.run(contend(lock, order, "2"))
    assert order == ["1a+", "1a-", "1b+", "1b-", "2a+", "2a-", "2b+", "2b-"]
    assert not lock.locked()


def test_a_holder_on_one_loop_excludes_a_waiter_on_another() -> None:
    lock = LoopFreeLock()
    order: list[str] = []
    held, go = threading.Event(), threading.Event()

    async def first() -> None:
        async with lock:
            order.append("first+")
            held.set()
            await asyncio.get_running_loop().run_in_executor(None, go.wait)
            order.append("first-")

    async def second() -> None:
        held.wait()
        waiting = asyncio.ensure_future(lock.acquire())
        await asyncio.sleep(0.01)
        assert not waiting.done()  # the other loop holds it
        go.set()
        await waiting
        order.append("second+")
        lock.release()

    thread = threading.Thread(target=asyncio.run, args=(first(),))
    thread.start()
    asyncio.run(second())
    thread.join()
    assert order == ["first+", "first-", "second+"]


def test_a_cancelled_waiter_passes_the_lock_on() -> None:
    lock = LoopFreeLock()

    async def main() -> None:
        await lock.acquire()
        cancelled = asyncio.ensure_future(lock.acquire())
        after = asyncio.ensure_future(lock.acquire())
        await asyncio.sleep(0)
        lock.release()  # handed to `cancelled`, which is cancelled before it runs
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        await after  # `cancelled` passed the lock on
        assert lock.locked()
        lock.release()
        assert not lock.locked()

    asyncio.run(main())


def test_releasing_a_free_lock_is_refused() -> None:
    with pytest.raises(RuntimeError, match="not held"):
        LoopFreeLock().release()
