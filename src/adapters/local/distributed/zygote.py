"""The zygote: imports what a rank needs once, then forks ranks on request (see processes.py).

Protocol, one JSON object per line. In (stdin): {"env": {...}, "log": path, "cwd": path}
starts a rank there.
Out (stdout): {"ready": true} once the imports are done, {"spawned": pid} for each request
in order, {"exited": pid, "code": status} when a rank ends (negative: killed by that signal).
When stdin closes, every rank still running is killed and reaped, and the zygote exits.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import traceback
from typing import Any


def main() -> None:
    _preload()
    import torch

    if torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        # a forked child could not use the GPU; the frontend starts fresh interpreters instead
        sys.stderr.write("CUDA was initialised while importing; ranks cannot be forked\n")
        sys.exit(2)
    out = sys.stdout
    children: set[int] = set()
    _say(out, {"ready": True})
    buffer = b""
    stdin = sys.stdin.fileno()  # read raw: select and a buffered reader do not mix
    while True:
        readable, _, _ = select.select([stdin], [], [], 0.05)
        if readable:
            chunk = os.read(stdin, 65536)
            if not chunk:
                break
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                request = json.loads(line)
                pid = _fork_rank(request["env"], request["log"], request["cwd"])
                children.add(pid)
                _say(out, {"spawned": pid})
        _reap(out, children)
    for pid in children:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    while children:
        _reap(out, children, block=True)


def _preload() -> None:
    """Everything a rank imports, so forks start with it in memory. No torch op runs here
    and CUDA is never initialised (a forked child could not use it)."""
    import torch
    import torch.distributed
    import torch.distributed.checkpoint.state_dict
    import torch.distributed.fsdp
    import transformers

    from . import sharded, worker  # noqa: F401

    del torch, transformers
    try:
        import peft  # noqa: F401
    except ImportError:
        pass  # full fine-tuning needs no peft


def _fork_rank(env: dict[str, str], log: str, cwd: str) -> int:
    pid = os.fork()
    if pid:
        return pid
    try:  # the child: a rank; it never returns into the loop above
        os.setsid()
        os.chdir(cwd)
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        sys.stdout = os.fdopen(1, "w", buffering=1)
        sys.stderr = os.fdopen(2, "w", buffering=1)
        os.environ.clear()
        os.environ.update(env)
        os.environ["ARTHEX_PARENT_PID"] = str(os.getppid())  # the zygote, not the frontend
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        from . import worker

        worker.main()
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
    os._exit(1)


def _reap(out: Any, children: set[int], *, block: bool = False) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, 0 if block else os.WNOHANG)
        except ChildProcessError:
            children.clear()
            return
        if pid == 0:
            return
        children.discard(pid)
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        _say(out, {"exited": pid, "code": code})
        if block:
            return


def _say(out: Any, message: dict[str, Any]) -> None:
    out.write(json.dumps(message) + "\n")
    out.flush()


if __name__ == "__main__":
    main()
