"""Run ART's `utils.logging` and `utils.lifecycle` (ART's, or arthex's under `arthex.art`: the
first argument names the package) on the cases read as JSON from stdin, and print what each
gave, as JSON: the printed lines (the time replaced by HH:MM:SS), the shutdown budgets, what
`complete_task` hands back when its caller is cancelled, `cleanup_after_failure`'s group, the
exit codes of process groups ended politely and by force, the supervisor's report of a child
that exits, and a service closed by SIGTERM.

Run by ART's interpreter for ART; the interop test runs arthex's cases in its own process.
"""

import asyncio
import contextlib
import importlib
import io
import json
import os
import re
import signal
import subprocess
import sys


def printed(nice, messages):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for name, message in messages:
            getattr(nice, name)(message)
    return re.sub(r"^\[\d\d:\d\d:\d\d\] ", "[HH:MM:SS] ", out.getvalue(), flags=re.M)


async def completed(lifecycle, fail):
    async def work():
        await asyncio.sleep(0.01)
        if fail:
            raise OSError("disk full")
        return 42

    waiter = asyncio.create_task(lifecycle.complete_task(asyncio.create_task(work())))
    await asyncio.sleep(0)
    waiter.cancel()
    try:
        result, held = await waiter
    except BaseException as error:
        return [type(error).__name__, getattr(error, "__notes__", [])]
    return [result, type(held).__name__]


async def cleaned(lifecycle):
    async def broken():
        raise RuntimeError("port still bound")

    try:
        await lifecycle.cleanup_after_failure(ValueError("bad"), broken, message="start failed")
    except BaseExceptionGroup as group:
        return [group.message, [repr(e) for e in group.exceptions], group.__cause__ is None]
    return None


def ended(lifecycle, trap, timeout):
    process = subprocess.Popen(
        ["sh", "-c", f"{trap}; echo ready; exec sleep 30"],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    process.stdout.readline()
    lifecycle.terminate_popen_process_group(process, timeout=timeout)
    process.stdout.close()
    return process.returncode


async def supervised(lifecycle, child):
    seen = []
    reported = asyncio.Event()

    def report(error):
        seen.append(str(error))
        reported.set()

    supervisor = lifecycle.ChildProcessSupervisor(report)
    supervisor.watch_popen("worker", child, log_path="/logs/worker.log")
    await reported.wait()
    try:
        supervisor.raise_if_failed()
    except RuntimeError as error:
        seen.append(str(error))
    return seen


def exiting(code):
    return subprocess.Popen([sys.executable, "-c", f"raise SystemExit({code})"])


def closed_by_sigterm(lifecycle):
    calls = []
    before = signal.signal(signal.SIGTERM, lambda signum, frame: calls.append(f"old {signum}"))
    service = lifecycle.ServiceLifecycle()
    service.install_parent_cleanup(lambda: calls.append("close"))
    os.kill(os.getpid(), signal.SIGTERM)
    calls += [service.begin_close(), service.begin_close()]
    service.restore_parent_cleanup()
    os.kill(os.getpid(), signal.SIGTERM)  # the old handler alone now
    signal.signal(signal.SIGTERM, before)
    return calls


def run(lib, cases):
    nice = importlib.import_module(f"{lib}.utils.logging")
    lifecycle = importlib.import_module(f"{lib}.utils.lifecycle")
    return {
        "printed": printed(nice, cases["messages"]),
        "budgets": [lifecycle.process_shutdown_timeout(level) for level in cases["levels"]],
        "constants": [
            lifecycle.PROCESS_SHUTDOWN_TIMEOUT_SECONDS,
            lifecycle.process_shutdown_sweep_grace(),
        ],
        "completed": [asyncio.run(completed(lifecycle, fail)) for fail in (False, True)],
        "cleaned": asyncio.run(cleaned(lifecycle)),
        "ended": [ended(lifecycle, trap, t) for trap, t in (("true", 5), ("trap '' TERM", 0.1))],
        "supervised": asyncio.run(supervised(lifecycle, exiting(cases["exit_code"]))),
        "service": closed_by_sigterm(lifecycle),
    }


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1], json.load(sys.stdin))))
