"""A child command that cannot outlive the process that started it (ART's
`art.utils.managed_process`, started by `managed_process_cmd`).

`python -m arthex.utils.managed_process --parent-pid P --child-timeout T --sweep-grace G --
command...` becomes a supervisor in a session of its own: it starts the command in a new
session too, asks Linux to SIGTERM that command if the supervisor dies
(`PR_SET_PDEATHSIG`), and watches its own parent. When the parent is gone (or the supervisor
gets SIGTERM or SIGINT), the command is sent that signal, given `T` seconds to exit, then its
whole process group is SIGTERMed, given `G` seconds, and SIGKILLed; the supervisor exits 1
(or 128 + the signal). When the command exits on its own, what is left of its group is swept
the same way and the supervisor exits with the command's code.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

__all__ = ["main", "parse_args", "set_parent_death_signal"]

_PR_SET_PDEATHSIG = 1
POLL_SECONDS = 0.5


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """`--parent-pid`, `--child-timeout`, `--sweep-grace` and the command after them (a
    leading `--` dropped); a missing command is a usage error (exit 2)."""
    parser = argparse.ArgumentParser(
        description="run a command that is stopped when the process that started it is gone"
    )
    parser.add_argument("--parent-pid", type=int, required=True)
    parser.add_argument("--child-timeout", type=float, required=True)
    parser.add_argument("--sweep-grace", type=float, required=True)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command: list[str] = list(args.command)
    args.command = command[1:] if command[:1] == ["--"] else command
    if not args.command:
        parser.error("no command given after the options")
    return args


def set_parent_death_signal(parent_pid: int, sig: signal.Signals) -> None:
    """Have Linux send `sig` to this process when its parent dies (nothing elsewhere); if the
    parent is already not `parent_pid` (it died before the request took hold), exit now."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    if os.getppid() != parent_pid:
        os._exit(1)


class _Supervisor:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.process: subprocess.Popen[bytes] | None = None
        self.requested: tuple[signal.Signals, int] | None = None

    def _signal_group(self, sig: signal.Signals) -> None:
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, sig)  # the command leads its own session and group
        except ProcessLookupError:
            pass

    def _sweep(self) -> None:
        self._signal_group(signal.SIGTERM)
        time.sleep(self.args.sweep_grace)
        self._signal_group(signal.SIGKILL)

    def _stop(self, sig: signal.Signals, code: int) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=self.args.child_timeout)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
                self.process.wait()
        self._sweep()
        os._exit(code)

    def _on_signal(self, number: int, _frame: object) -> None:
        self.requested = (signal.Signals(number), 128 + number)

    def run(self) -> None:
        if hasattr(os, "setsid") and os.getpgrp() != os.getpid():
            os.setsid()
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        me = os.getpid()
        self.process = subprocess.Popen(
            self.args.command,
            start_new_session=True,
            preexec_fn=lambda: set_parent_death_signal(me, signal.SIGTERM),
        )
        while True:
            if self.requested is not None:
                self._stop(*self.requested)
            if os.getppid() != self.args.parent_pid:
                self._stop(signal.SIGTERM, 1)
            code = self.process.poll()
            if code is not None:
                self._sweep()
                sys.exit(code)
            time.sleep(POLL_SECONDS)


def main(argv: Sequence[str] | None = None) -> None:
    """Supervise the command of `argv` (default: this process's arguments); see the module."""
    _Supervisor(parse_args(argv)).run()


if __name__ == "__main__":
    main()
