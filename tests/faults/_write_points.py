"""The tiny-model training loop (`_training_loop`), with every file-system write it makes
under the run's base path numbered, in a child process.

The writes are seen where Python makes them: the interpreter's audit events for opening a
file to write, renaming (`os.rename` and `os.replace`), linking, removing, making and
removing folders and `shutil.rmtree` (its entries, named relative to a folder descriptor,
are resolved through /proc), plus `os.fsync` and `os.write`, which raise no audit event and are
wrapped. Libraries that write in their own code (safetensors in Rust, parquet in C++) open
and write without Python; the points before and after them (their temp path made, then
fsynced and renamed) bound what they leave.

`pipeline=True` runs the pipeline trainer's loop (`_pipeline_loop`) instead, over
`range(scenarios)`.

`count=True`: the child reports each write as an event `{"event": "op", "n", "op", "path"}`.
`kill_op=K`: the child SIGKILLs itself just before its K-th write (1-based), so the write
and all after it never happen; a kill before K+1 is a kill right after K. With `tear=True`
and an `os.write` at K, the first half of its bytes is written before the kill: an append
cut short, as a kill or a crash inside a large write leaves it.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from . import _pipeline_loop, _training_loop

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
_PATH_EVENTS = {
    "os.rename",
    "os.link",
    "os.symlink",
    "os.remove",
    "os.mkdir",
    "os.rmdir",
    "shutil.rmtree",
    "os.truncate",
}


def _fd_path(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


def _full(path: Any, dir_fd: Any = None) -> str:
    if isinstance(path, int):
        return _fd_path(path)
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    text = os.fspath(path) if path is not None else ""
    if isinstance(dir_fd, int) and dir_fd >= 0 and not os.path.isabs(text):
        return os.path.join(_fd_path(dir_fd), text)
    return os.path.abspath(text)


class WritePoints:
    """Numbers the writes under `root`; reports them, or kills the process at one."""

    def __init__(
        self, root: str, events: Connection, *, count: bool, kill_op: int, tear: bool
    ) -> None:
        self.root = os.path.realpath(root) + os.sep
        self.events, self.count, self.kill_op, self.tear = events, count, kill_op, tear
        self.n = 0
        self.lock = threading.Lock()
        self.inside = threading.local()

    def seen(self, op: str, path: str, half: Callable[[], object] | None = None) -> None:
        if getattr(self.inside, "busy", False) or not path.startswith(self.root):
            return
        self.inside.busy = True  # sending an event writes to a pipe: not a point
        try:
            with self.lock:
                self.n += 1
                n = self.n
                relative = path[len(self.root) :]
                if self.count:
                    self.events.send({"event": "op", "n": n, "op": op, "path": relative})
                if n == self.kill_op:
                    torn = self.tear and half is not None
                    if torn and half is not None:
                        half()
                    self.events.send(
                        {"event": "self-kill", "n": n, "op": op, "path": relative, "torn": torn}
                    )
                    os.kill(os.getpid(), signal.SIGKILL)
        finally:
            self.inside.busy = False

    def audit(self, event: str, args: tuple[Any, ...]) -> None:
        if event == "open":
            path, _mode, flags = args
            if isinstance(flags, int) and flags & _WRITE_FLAGS and path is not None:
                self.seen("open-write", _full(path))
        elif event in _PATH_EVENTS:
            # the folder descriptor a name is relative to: a rename's or link's source, else last
            two = event in ("os.rename", "os.link", "os.symlink")
            dir_fd = args[2] if two else args[-1] if len(args) > 1 else None
            self.seen(event, _full(args[0], None if event == "os.truncate" else dir_fd))

    def wrap_fd_call(self, name: str) -> None:
        original: Callable[..., Any] = getattr(os, name)

        def hooked(fd: int, *args: Any) -> Any:
            def half() -> object:  # a write cut short: its first half reaches the file
                data = bytes(args[0])
                return original(fd, data[: len(data) // 2])

            self.seen(f"os.{name}", _fd_path(fd), half if name == "write" else None)
            return original(fd, *args)

        setattr(os, name, hooked)


def child_main(options: dict[str, Any], events: Connection) -> None:
    points = WritePoints(
        options["base_path"],
        events,
        count=bool(options.get("count")),
        kill_op=int(options.get("kill_op") or 0),
        tear=bool(options.get("tear")),
    )
    points.wrap_fd_call("fsync")
    points.wrap_fd_call("write")
    sys.addaudithook(points.audit)  # lives as long as this child, which is its purpose
    if options.get("pipeline"):
        _pipeline_loop.child_main(options, events)
    else:
        _training_loop.child_main(options, events)
