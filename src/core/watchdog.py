"""The hang watchdog: when `gather`, `train`, a rollout or a backend call makes no progress for
`ARTHEX_WATCHDOG_S` seconds (default 600; 0 turns it off), the stacks of every thread and of
every asyncio task (with what each awaits), and the trainer ranks' stacks where a backend has
ranks, are written to a report and one line points at it. Nothing is interrupted: training goes
on, and a second report is written only after progress resumes and stalls again.

One watchdog per process (`WATCHDOG`): code marks what it is doing with `activity(what)` (a
context manager) and each step forward with `beat()`. Each model that trains attaches itself
at `register` with where its reports go (`{run}/diagnostics/hang-{time}.txt`, written by the
composition root's writer) and, when its backend has ranks, how to collect their stacks. The
watching thread runs only while at least one model is attached with a non-zero timeout; it is
stopped when the last one detaches (`close`, the backend closing, garbage collection) and at
interpreter exit.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import contextlib
import itertools
import logging
import os
import sys
import tempfile
import threading
import time
import traceback
import weakref
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

import attrs

from .errors import InvalidInputError

WATCHDOG_ENV = "ARTHEX_WATCHDOG_S"
DEFAULT_SECONDS = 600.0

logger = logging.getLogger("arthex")

ReportWriter = Callable[[str, str], str]
"""(file name, text) -> where the report was written."""
RankStacks = Callable[[], str | None]
"""The trainer ranks' stacks as text (None: the backend has no ranks running)."""


def watchdog_seconds(environ: Mapping[str, str] | None = None) -> float:
    """`ARTHEX_WATCHDOG_S`, checked: seconds >= 0 (0: off); unset means 600."""
    text = (os.environ if environ is None else environ).get(WATCHDOG_ENV)
    if text is None or not text.strip():
        return DEFAULT_SECONDS
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0 or seconds == float("inf"):
        raise InvalidInputError(
            f"{WATCHDOG_ENV} must be a number of seconds >= 0 (0 turns the hang watchdog off), "
            f"got {text!r}"
        )
    return seconds


@attrs.define(eq=False)
class _Watched:
    label: str
    seconds: float
    write: ReportWriter | None
    ranks: RankStacks | None
    reported: int = -1  # the progress epoch of the stall last reported for this run


class Watchdog:
    """See the module docstring. Thread-safe; `activity` and `beat` are cheap (a lock and a
    counter), so they sit on every hot path."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holding = threading.local()  # `depth` > 0: this thread is in `_held`
        self._gone: collections.deque[int] = collections.deque()  # detached, not yet removed
        self._busy: Counter[str] = Counter()
        self._last = time.monotonic()
        self._epoch = 0  # counts progress: a stall is reported once per epoch and run
        self._watched: dict[int, _Watched] = {}
        self._ids = itertools.count(1)
        self._loops: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.reports: list[str] = []  # where the reports of this process went, oldest first

    # --- what the code does -------------------------------------------------------------

    @contextlib.contextmanager
    def activity(self, what: str) -> Iterator[None]:
        """Mark `what` ("train", "gather", "rollout", "backend.register", ...) as in progress:
        a stall inside it is a hang. Entering and leaving count as progress."""
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        with self._held():
            self._busy[what] += 1
            self._progress()
            if loop is not None and loop not in self._loops:
                self._loops.add(loop)
        try:
            yield
        finally:
            with self._held():
                self._busy[what] -= 1
                if self._busy[what] <= 0:
                    del self._busy[what]
                self._progress()

    def beat(self) -> None:
        """A step forward (a rollout finished, a gradient step done)."""
        with self._held():
            self._progress()

    def _progress(self) -> None:
        self._last = time.monotonic()
        self._epoch += 1  # progress resumed: the next stall is reported again

    @contextlib.contextmanager
    def _held(self) -> Iterator[None]:
        """The lock, with this thread marked as in it from before taking it to after letting
        go: a model collected meanwhile (the collector runs finalizers at any allocation, on
        whichever thread allocates) must not wait for a lock its own thread holds."""
        holding = self._holding
        holding.depth = getattr(holding, "depth", 0) + 1
        try:
            with self._lock:
                self._drain()
                yield
        finally:
            holding.depth -= 1

    def _drain(self) -> None:
        """Remove the runs detached while the lock was held (under the lock)."""
        while self._gone:
            self._watched.pop(self._gone.popleft(), None)

    # --- who is watched ------------------------------------------------------------------

    def attach(
        self, label: str, seconds: float, write: ReportWriter | None, ranks: RankStacks | None
    ) -> Callable[[], None]:
        """Watch on behalf of `label` (a run); returns the function that detaches it (call it
        once; it is safe to call again). With `seconds` 0 nothing is watched."""
        if seconds <= 0:
            return _nothing
        key = next(self._ids)
        with self._held():
            self._watched[key] = _Watched(label, seconds, write, ranks)
            start = self._thread is None or not self._thread.is_alive()
            if start:
                self._stop.clear()
                self._thread = threading.Thread(
                    target=self._watch, name="arthex-watchdog", daemon=True
                )
        if start:
            assert self._thread is not None
            self._thread.start()
        return lambda: self._detach(key)

    def _detach(self, key: int) -> None:
        self._gone.append(key)
        if getattr(self._holding, "depth", 0):
            return  # collected inside this thread's own hold: removed at the next one
        with self._held():
            thread = self._thread if not self._watched else None
            if thread is not None:
                self._thread = None
                self._stop.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5.0)

    @property
    def watching(self) -> list[str]:
        """The labels (runs) watched now."""
        with self._held():
            return [entry.label for entry in self._watched.values()]

    @property
    def running(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive()

    def stop(self) -> None:
        """Stop watching for everyone (interpreter exit)."""
        with self._held():
            self._watched.clear()
            thread, self._thread = self._thread, None
            self._stop.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5.0)

    # --- the watching thread -------------------------------------------------------------

    def _watch(self) -> None:
        stop = self._stop
        while True:
            with self._held():
                watched = list(self._watched.values())
                if not watched:  # the last run went (perhaps collected): this thread ends
                    if self._thread is threading.current_thread():
                        self._thread = None
                    return
            seconds = min(w.seconds for w in watched)
            if stop.wait(min(max(seconds / 4, 0.05), 5.0)):
                return
            with self._held():
                idle = time.monotonic() - self._last
                due = [
                    w
                    for w in self._watched.values()
                    if self._busy and idle >= w.seconds and w.reported != self._epoch
                ]
                for entry in due:
                    entry.reported = self._epoch
                busy = dict(self._busy)
                loops = list(self._loops)
            if due:
                try:
                    self._report(due, busy, idle, loops)
                except Exception:  # the watchdog never takes the run down
                    logger.exception("the hang watchdog could not write its report")

    def _report(
        self,
        watched: list[_Watched],
        busy: dict[str, int],
        idle: float,
        loops: list[asyncio.AbstractEventLoop],
    ) -> None:
        now = datetime.now(UTC)
        name = f"hang-{now.strftime('%Y%m%dT%H%M%S')}-{now.microsecond:06d}.txt"
        doing = ", ".join(f"{what} x{n}" if n > 1 else what for what, n in sorted(busy.items()))
        head = (
            f"arthex hang report, {now.isoformat()}\n"
            f"no progress for {idle:.1f}s ({WATCHDOG_ENV}={min(w.seconds for w in watched):g}) "
            f"while in: {doing}\n"
        )
        body = head + "\n" + thread_stacks() + "\n" + task_stacks(loops)
        written: list[tuple[str, str]] = []
        for entry in watched:
            text = body
            if entry.ranks is not None:
                try:
                    ranks = entry.ranks()
                except Exception as exc:
                    ranks = f"(the rank stacks could not be collected: {exc})"
                if ranks:
                    text += "\n== trainer ranks ==\n" + ranks
            where = entry.write(name, text) if entry.write is not None else _temp_report(text)
            written.append((entry.label, where))
            self.reports.append(where)
        for label, where in written:
            logger.warning(
                "%s: no progress in %s for %.0fs: stacks of every thread and task written to %s "
                "(training goes on; %s=0 turns this off)",
                label,
                doing,
                idle,
                where,
                WATCHDOG_ENV,
            )


def _nothing() -> None:
    return None


def _temp_report(text: str) -> str:
    """Where a report goes when the run has no local directory (an object store)."""
    fd, path = tempfile.mkstemp(prefix="arthex-hang-", suffix=".txt")
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
    return path


def thread_stacks() -> str:
    """Every thread's stack, innermost call last."""
    frames = sys._current_frames()
    lines = ["== threads =="]
    for thread in threading.enumerate():
        frame = frames.get(thread.ident) if thread.ident is not None else None
        kind = " (daemon)" if thread.daemon else ""
        lines.append(f"\n-- thread {thread.name!r}{kind}, id {thread.ident} --")
        if frame is None:
            lines.append("  (no frame)")
            continue
        lines.extend(line.rstrip("\n") for line in traceback.format_stack(frame))
    return "\n".join(lines) + "\n"


def task_stacks(loops: list[asyncio.AbstractEventLoop]) -> str:
    """Every asyncio task of the loops: its stack through every coroutine it awaits (outermost
    first, like a traceback) and the innermost thing it waits on."""
    lines = ["== asyncio tasks =="]
    for loop in loops:
        if loop.is_closed():
            continue
        try:
            tasks = sorted(asyncio.all_tasks(loop), key=lambda t: t.get_name())
        except RuntimeError as exc:  # the loop's task set changed under us; rare
            lines.append(f"(the tasks of a loop could not be listed: {exc})")
            continue
        for task in tasks:
            chain, waiting = _await_chain(task.get_coro())
            lines.append(f"\n-- task {task.get_name()!r}: {_qualname(task.get_coro())} --")
            lines.append(f"  awaits: {' -> '.join([*map(_qualname, chain[1:]), waiting])}")
            frames = [frame for frame in map(_frame_of, chain) if frame is not None]
            summary = traceback.StackSummary.extract((frame, frame.f_lineno) for frame in frames)
            lines.extend(line.rstrip("\n") for line in summary.format())
    return "\n".join(lines) + "\n"


def _await_chain(coro: Any) -> tuple[list[Any], str]:
    """The coroutines (and generators) from `coro` down to the innermost, and what that one
    waits on ("a Future", a task, ...)."""
    chain = [coro]
    current = coro
    for _ in range(256):
        inner = getattr(current, "cr_await", None) or getattr(current, "gi_yieldfrom", None)
        if inner is None:
            running = getattr(current, "cr_running", False) or getattr(current, "gi_running", False)
            return chain, "(running)" if running else "(nothing: about to run)"
        if _frame_of(inner) is None:
            return chain, _waited_on(inner)
        chain.append(inner)
        current = inner
    return chain, "(deeper than 256 awaits)"


def _waited_on(awaitable: Any) -> str:
    if isinstance(awaitable, asyncio.Task):
        return f"task {awaitable.get_name()!r}"
    if isinstance(awaitable, asyncio.Future):
        return "a Future"
    name = type(awaitable).__name__
    return "a Future" if name == "FutureIter" else _short(f"{name} {awaitable!r}")


def _frame_of(coro: Any) -> Any:
    for attribute in ("cr_frame", "gi_frame", "ag_frame"):
        frame = getattr(coro, attribute, None)
        if frame is not None:
            return frame
    return None


def _qualname(coro: Any) -> str:
    name = getattr(coro, "__qualname__", None)
    return name if isinstance(name, str) else type(coro).__name__


def _short(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


WATCHDOG = Watchdog()
atexit.register(WATCHDOG.stop)
