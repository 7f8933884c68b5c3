"""Shutting down child processes and finishing work that must not be cut short.

ART's `art.utils.lifecycle`, written for arthex, for scripts that start servers or workers
of their own:

- `complete_task(task)` waits for a task to end even when the waiter is cancelled meanwhile
  (a checkpoint write, an upload), then hands back its result and the cancellation it held
  back, so the caller re-raises it once the work is safe; `complete_to_thread` does that for
  a blocking call run in a thread;
- `terminate_popen_process_group`/`terminate_asyncio_process_group` end a child's whole
  process group: SIGTERM, a grace period, then SIGKILL, and reap it;
- `ChildProcessSupervisor` reports a watched child that exits while nobody is closing it;
- `ServiceLifecycle` runs a close function once, at exit or on SIGINT/SIGTERM, and puts the
  previous handlers back.

The grace periods shrink with the nesting level of what is being shut down
(`process_shutdown_timeout`), so an outer supervisor waits longer than the ones inside it.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from types import FrameType
from typing import Any, Protocol, TypeVar

__all__ = [
    "PROCESS_SHUTDOWN_TIMEOUT_SECONDS",
    "ChildProcessSupervisor",
    "ServiceLifecycle",
    "cleanup_after_failure",
    "complete_task",
    "complete_to_thread",
    "consume_future_exception",
    "kill_process_group",
    "managed_process_cmd",
    "process_shutdown_sweep_grace",
    "process_shutdown_timeout",
    "terminate_asyncio_process_group",
    "terminate_popen_process_group",
]

PROCESS_SHUTDOWN_TIMEOUT_SECONDS = 20.0
# each nesting level waits a tenth less than the one around it, never under a tenth
_LEVEL_SHARE = 0.1
_FLOOR_SHARE = 0.1
_SWEEP_SHARE = 0.05
_POLL_SECONDS = 0.05

T = TypeVar("T")
Handler = Callable[[int, FrameType | None], Any] | int | None


class AsyncioProcess(Protocol):
    """What the shutdown reads of an `asyncio.subprocess.Process`."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    async def wait(self) -> int: ...


def process_shutdown_timeout(level: int) -> float:
    """Seconds to wait for a process at nesting `level` (0 outermost) to exit after SIGTERM:
    20 s at level 0, 2 s less per level, never under 2 s."""
    return PROCESS_SHUTDOWN_TIMEOUT_SECONDS * max(_FLOOR_SHARE, 1.0 - _LEVEL_SHARE * level)


def process_shutdown_sweep_grace() -> float:
    """Seconds left, after a group's leader exits, for the rest of its group to go (1 s)."""
    return PROCESS_SHUTDOWN_TIMEOUT_SECONDS * _SWEEP_SHARE


async def complete_task(task: asyncio.Task[T]) -> tuple[T, asyncio.CancelledError | None]:
    """Wait for `task` to finish, even through cancellations of the caller; give back its
    result and the first cancellation held back (None if none came), for the caller to
    raise once it is done. If the task fails after a cancellation came, the cancellation is
    raised, noting the failure; a task that was itself cancelled raises CancelledError."""
    held: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError as cancellation:
            if task.cancelled():
                break
            if held is None:
                held = cancellation
        except BaseException:
            break  # the task failed: its own error is raised below
    try:
        result = task.result()
    except BaseException as failure:
        if held is None:
            raise
        held.add_note(f"operation also failed: {failure}")
        raise held from failure
    return result, held


async def complete_to_thread(
    operation: Callable[[], T],
) -> tuple[T, asyncio.CancelledError | None]:
    """`complete_task` for a blocking call run in a worker thread."""
    return await complete_task(asyncio.create_task(asyncio.to_thread(operation)))


def consume_future_exception(future: asyncio.Future[Any]) -> None:
    """Mark a finished future's error as seen (a done callback), so asyncio does not log
    "exception was never retrieved" for work nobody awaits."""
    if not future.cancelled():
        future.exception()


async def cleanup_after_failure(
    primary: BaseException,
    cleanup: Callable[[], Awaitable[None]],
    *,
    message: str,
) -> None:
    """Run `cleanup` after `primary` failed; if the cleanup fails too, raise both together as
    a BaseExceptionGroup named `message` (the caller raises `primary` itself otherwise)."""
    try:
        await cleanup()
    except BaseException as second:
        raise BaseExceptionGroup(message, [primary, second]) from None


def managed_process_cmd(command: Sequence[str], *, parent_pid: int | None = None) -> list[str]:
    """`command` wrapped so that it cannot outlive `parent_pid` (default: this process): run
    the returned list (arthex.utils.managed_process supervises the command; when the parent
    is gone it is stopped, given a nesting-level-2 timeout, then its group swept)."""
    return [
        sys.executable,
        "-m",
        "arthex.utils.managed_process",
        "--parent-pid",
        str(parent_pid or os.getpid()),
        "--child-timeout",
        str(process_shutdown_timeout(2)),
        "--sweep-grace",
        str(process_shutdown_sweep_grace()),
        "--",
        *command,
    ]


def kill_process_group(pid: int, sig: signal.Signals) -> None:
    """Send `sig` to the process group of `pid`; a process already gone is not an error."""
    try:
        os.killpg(os.getpgid(pid), sig)
    except ProcessLookupError:
        pass


def terminate_popen_process_group(
    process: subprocess.Popen[Any], *, timeout: float = process_shutdown_timeout(1)
) -> None:
    """End `process`'s group: SIGTERM (unless it has exited), wait up to `timeout` seconds,
    then SIGKILL; the process is reaped either way."""
    if process.poll() is None:
        kill_process_group(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_process_group(process.pid, signal.SIGKILL)
        process.wait()


def _reaped(pid: int, *, block: bool) -> bool:
    """Whether `pid` has been reaped now (by this call or before it)."""
    try:
        finished, _ = os.waitpid(pid, 0 if block else os.WNOHANG)
    except ChildProcessError:
        return True  # reaped already, or not our child
    return finished != 0


def terminate_asyncio_process_group(
    process: AsyncioProcess, *, timeout: float = process_shutdown_timeout(1)
) -> None:
    """`terminate_popen_process_group` for an asyncio subprocess, from synchronous code (an
    atexit or signal handler, where the event loop cannot be awaited): it polls the child
    with waitpid instead."""
    if process.returncode is None:
        kill_process_group(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _reaped(process.pid, block=False):
            return
        time.sleep(_POLL_SECONDS)
    kill_process_group(process.pid, signal.SIGKILL)
    _reaped(process.pid, block=True)


class ChildProcessSupervisor:
    """Watches named child processes; one that exits before `close()` is a failure: a
    RuntimeError naming it, its exit code and its log file, handed to `on_unexpected_exit`
    and raised by `raise_if_failed()`. Watching a name again replaces the earlier watch.
    Create it inside a running event loop."""

    def __init__(self, on_unexpected_exit: Callable[[RuntimeError], None]) -> None:
        self._on_unexpected_exit = on_unexpected_exit
        self._watches: dict[str, asyncio.Task[None]] = {}
        self._failure: RuntimeError | None = None
        self._closing = False

    def watch_popen(self, name: str, process: subprocess.Popen[Any], *, log_path: str) -> None:
        async def wait() -> int:
            return await asyncio.to_thread(process.wait)

        self._watch(name, wait, log_path)

    def watch_asyncio_process(self, name: str, process: AsyncioProcess, *, log_path: str) -> None:
        self._watch(name, process.wait, log_path)

    def raise_if_failed(self) -> None:
        if self._failure is not None:
            raise self._failure

    def close(self) -> None:
        """Stop watching: exits from now on are expected. Safe to call from a watch's own
        callback (that watch is left to finish)."""
        self._closing = True
        try:
            current = asyncio.current_task()
        except RuntimeError:  # no running loop
            current = None
        for watch in self._watches.values():
            if watch is not current:
                watch.cancel()
        self._watches.clear()

    def _watch(self, name: str, wait: Callable[[], Awaitable[int]], log_path: str) -> None:
        earlier = self._watches.pop(name, None)
        if earlier is not None:
            earlier.cancel()
        self._watches[name] = asyncio.create_task(self._until_exit(name, wait, log_path))

    async def _until_exit(
        self, name: str, wait: Callable[[], Awaitable[int]], log_path: str
    ) -> None:
        try:
            code = await wait()
        except asyncio.CancelledError:
            return
        if self._closing:
            return
        self._failure = RuntimeError(f"{name} exited with code {code}. Check logs at {log_path}")
        self._on_unexpected_exit(self._failure)


class ServiceLifecycle:
    """Closes a service once, however the process ends: `install_parent_cleanup(close)`
    registers `close` to run at exit and on SIGINT/SIGTERM (then the handler that was there
    runs, or the default: KeyboardInterrupt for SIGINT, exit status 128 + signal for
    SIGTERM; an ignored signal stays ignored). `begin_close()` is true once, for the first
    caller. Install from the main thread (Python's rule for signal handlers)."""

    def __init__(self) -> None:
        self.closing = False
        self._close: Callable[[], None] | None = None
        self._previous: dict[int, Handler] = {}

    def begin_close(self) -> bool:
        if self.closing:
            return False
        self.closing = True
        return True

    def install_parent_cleanup(self, close: Callable[[], None]) -> None:
        """Register `close` (a second call, before `restore_parent_cleanup`, does nothing)."""
        if self._close is not None:
            return
        self._close = close
        atexit.register(close)
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous = signal.getsignal(signum)
            self._previous[signum] = previous
            signal.signal(signum, _closing_handler(close, previous))

    def restore_parent_cleanup(self) -> None:
        """Undo `install_parent_cleanup`: the atexit hook and the signal handlers as before."""
        if self._close is not None:
            atexit.unregister(self._close)
            self._close = None
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()


def _closing_handler(
    close: Callable[[], None], previous: Handler
) -> Callable[[int, FrameType | None], None]:
    def handle(signum: int, frame: FrameType | None) -> None:
        close()
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_IGN:
            return
        elif signum == signal.SIGINT:
            raise KeyboardInterrupt
        else:
            raise SystemExit(128 + signum)

    return handle
