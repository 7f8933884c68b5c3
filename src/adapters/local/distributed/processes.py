"""Starting this machine's rank processes, fast.

A rank imports torch, torch.distributed, transformers and peft before it can do anything,
which takes seconds, every time ranks start (a run's first train, and again after each
failure). On Linux the frontend therefore keeps one helper process (the "zygote", zygote.py)
that imports all of that once and forks a rank from itself on request; the fork starts in
milliseconds with everything imported. The zygote runs no torch op and never touches CUDA, so
forking it is as safe as torch's own fork-started DataLoader workers. Elsewhere, and when the
zygote cannot be started, each rank is a fresh interpreter.

The zygote is shared by the rank groups of the frontend process that use it: a group holds it
from its first forked rank until the group is closed (`let_go`) or collected, and when the
last holder lets go the zygote is closed, so a closed backend leaves no process behind, after
a rank failure as after a clean run. The next rank needed starts a new one.

Either way a rank is a `RankProcess`: its pid, its exit status once it has ended (Popen's
convention: negative for a signal), and a kill that takes its whole process group (each rank
calls setsid, so whatever it starts goes with it). The zygote reaps its children and reports
their statuses; it kills them all and exits when the frontend goes away (its stdin closes).
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import warnings
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any, Protocol

from ....core.errors import BackendError

WORKER_MODULE = "arthex.adapters.local.distributed.worker"
ZYGOTE_MODULE = "arthex.adapters.local.distributed.zygote"


class RankProcess(Protocol):
    pid: int

    def poll(self) -> int | None: ...

    def wait(self) -> int: ...


def kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # already gone (its group with it)


def start_rank(env: Mapping[str, str], log: Path, holder: object) -> RankProcess:
    """A rank with this environment, its output appended to `log`. A forked rank makes
    `holder` (its rank group) hold the zygote until it calls `let_go(holder)`."""
    global _FORKING
    if _FORKING and sys.platform == "linux" and os.environ.get("ARTHEX_RANK_ZYGOTE") != "0":
        try:
            return _zygote(holder).spawn(env, log)
        except BackendError as exc:
            _FORKING = False  # not again in this process: each rank starts fresh from here on
            warnings.warn(f"{exc}; starting ranks as fresh interpreters", stacklevel=2)
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", WORKER_MODULE],
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


class ForkedRank:
    """A rank forked by the zygote; its status arrives through the zygote's reports."""

    def __init__(self, pid: int, zygote: Zygote) -> None:
        self.pid = pid
        self._zygote = zygote

    def poll(self) -> int | None:
        return self._zygote.status(self.pid)

    def wait(self) -> int:
        return self._zygote.wait(self.pid)


class Zygote:
    """The frontend's handle on its zygote process (one per frontend process)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._statuses: dict[int, int] = {}
        self._spawned: list[int] = []
        self._gone: str | None = None
        self._log = Path(tempfile.mkdtemp(prefix="arthex-zygote-")) / "zygote.log"
        with open(self._log, "ab") as err:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", ZYGOTE_MODULE],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                start_new_session=True,
            )
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._requests: IO[bytes] = self._proc.stdin
        self._pid = os.getpid()
        self._ready = False
        threading.Thread(
            target=self._read, args=(self._proc.stdout,), name="arthex-zygote", daemon=True
        ).start()

    @property
    def owner(self) -> int:
        return self._pid

    def spawn(self, env: Mapping[str, str], log: Path) -> ForkedRank:
        with self._lock:
            # the zygote keeps the directory it started in; a rank works in the frontend's
            # current one, as a fresh process would (relative model paths resolve the same)
            request = {"env": dict(env), "log": str(log), "cwd": os.getcwd()}
            line = json.dumps(request) + "\n"
            before = len(self._spawned)
            try:
                self._requests.write(line.encode())
                self._requests.flush()
            except OSError as exc:
                raise self._dead(f"its pipe broke ({exc})") from exc
            while len(self._spawned) == before:
                if self._gone is not None:
                    raise self._dead(self._gone)
                self._changed.wait(timeout=1.0)
            return ForkedRank(self._spawned[before], self)

    def status(self, pid: int) -> int | None:
        with self._lock:
            return self._statuses.get(pid)

    def wait(self, pid: int) -> int:
        with self._lock:
            while pid not in self._statuses:
                self._changed.wait(timeout=1.0)
            return self._statuses[pid]

    def close(self) -> None:
        """Close its stdin: it kills whatever ranks are left and exits."""
        try:
            self._requests.close()
        except OSError:
            pass
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            kill_group(self._proc.pid)
            self._proc.wait()
        shutil.rmtree(self._log.parent, ignore_errors=True)

    def _read(self, stream: IO[bytes]) -> None:
        for line in stream:
            message = json.loads(line)
            with self._lock:
                if "spawned" in message:
                    self._spawned.append(int(message["spawned"]))
                elif "exited" in message:
                    self._statuses[int(message["exited"])] = int(message["code"])
                self._changed.notify_all()
        code = self._proc.wait()
        with self._lock:
            self._gone = f"it exited with status {code}"
            # its children are gone with it (each one watches its parent); say so
            for pid in self._spawned:
                self._statuses.setdefault(pid, -int(signal.SIGKILL))
            self._changed.notify_all()

    def _dead(self, why: str) -> BackendError:
        tail = self._log.read_text(errors="replace")[-1000:] if self._log.exists() else ""
        return BackendError(
            f"the process that starts this machine's trainer ranks died: {why}. Its output: "
            f"{tail or '(none)'}"
        )


_FORKING = True
_ZYGOTE: Zygote | None = None
_ZYGOTE_LOCK = threading.Lock()
# The rank groups holding _ZYGOTE, by id; each entry is the finalizer that lets go for a group
# collected without `let_go`.
_HOLDERS: dict[int, weakref.finalize[Any, Any]] = {}


def _zygote(holder: object) -> Zygote:
    global _ZYGOTE
    with _ZYGOTE_LOCK:
        if _ZYGOTE is None or _ZYGOTE.owner != os.getpid() or _ZYGOTE._gone is not None:
            stale, _ZYGOTE = _ZYGOTE, Zygote()
            for finalizer in _HOLDERS.values():
                finalizer.detach()
            _HOLDERS.clear()
            atexit.register(_ZYGOTE.close)
            if stale is not None and stale.owner == os.getpid():
                atexit.unregister(stale.close)
                stale.close()  # it exited already: this reaps it and removes its log
        key = id(holder)
        known = _HOLDERS.get(key)
        if known is None or not known.alive:  # not a holder yet (or a collected one's id)
            # It lets go off this thread: the collector may run the finalizer while this very
            # lock is held. At exit the atexit close does it.
            finalizer = weakref.finalize(holder, _let_go_later, key)
            finalizer.atexit = False
            _HOLDERS[key] = finalizer
        return _ZYGOTE


def let_go(holder: object) -> None:
    """`holder` needs no more ranks; the last holder to let go closes the zygote (which kills
    any rank it still has, and exits) and waits for it to end."""
    finalizer = _HOLDERS.get(id(holder))
    if finalizer is not None and finalizer.detach() is not None:
        _let_go(id(holder), finalizer)


def _let_go_later(key: int) -> None:
    finalizer = _HOLDERS.get(key)
    if finalizer is not None:
        thread = threading.Thread(
            target=_let_go, args=(key, finalizer), name="arthex-zygote-close", daemon=True
        )
        thread.start()


def _let_go(key: int, finalizer: weakref.finalize[Any, Any]) -> None:
    global _ZYGOTE
    with _ZYGOTE_LOCK:
        if _HOLDERS.get(key) is not finalizer:  # let go already, or a new zygote since
            return
        del _HOLDERS[key]
        if _HOLDERS:
            return
        zygote = _ZYGOTE
        if zygote is None or zygote.owner != os.getpid():
            return
        _ZYGOTE = None
    atexit.unregister(zygote.close)
    zygote.close()
