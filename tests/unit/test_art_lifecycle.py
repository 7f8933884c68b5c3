"""`art.utils.logging` and `art.utils.lifecycle` under arthex, on worked examples: the
printed lines byte for byte (ANSI colour codes written out by hand), the shutdown budgets as
arithmetic (20 s less a tenth per nesting level, floor 2 s), and the process helpers on real
child processes and real signals."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from types import FrameType

import pytest

from arthex.art.utils import lifecycle
from arthex.art.utils import logging as nice

STAMP = r"\[\d\d:\d\d:\d\d\] "


def test_each_line_is_the_time_a_coloured_label_and_the_message(
    capsys: pytest.CaptureFixture[str],
) -> None:
    nice.info("loading")
    nice.step(3)
    nice.ok("done")
    nice.warn("slow")
    nice.err("failed")
    nice.dim("detail")
    lines = capsys.readouterr().out.splitlines()
    assert [re.sub(STAMP, "", line, count=1) for line in lines] == [
        "\x1b[34mINFO\x1b[0m  loading",
        "\x1b[36mSTEP\x1b[0m  3",
        "\x1b[32mOK\x1b[0m    done",
        "\x1b[33mWARN\x1b[0m  slow",
        "\x1b[31mERR\x1b[0m   failed",
        "\x1b[2mdetail\x1b[0m",
    ]
    assert all(re.match(STAMP, line) for line in lines[:5]) and lines[5].startswith("\x1b[2m")


def test_the_shutdown_budget_shrinks_a_tenth_per_level_down_to_two_seconds() -> None:
    budgets = [lifecycle.process_shutdown_timeout(level) for level in (0, 1, 2, 5, 9, 10, 40)]
    assert budgets == pytest.approx([20.0, 18.0, 16.0, 10.0, 2.0, 2.0, 2.0])
    assert lifecycle.PROCESS_SHUTDOWN_TIMEOUT_SECONDS == 20.0
    assert lifecycle.process_shutdown_sweep_grace() == pytest.approx(1.0)


async def _cancelled_while_waiting(work: asyncio.Task[int]) -> tuple[int, object]:
    waiter = asyncio.create_task(lifecycle.complete_task(work))
    await asyncio.sleep(0)
    waiter.cancel()  # the caller goes away; the work must still finish
    result, held = await waiter
    return result, held


def test_a_task_completes_through_a_cancellation_which_is_handed_back() -> None:
    async def scenario() -> tuple[int, object, bool]:
        async def work() -> int:
            await asyncio.sleep(0.01)
            return 42

        task = asyncio.create_task(work())
        result, held = await _cancelled_while_waiting(task)
        return result, held, task.done()

    result, held, done = asyncio.run(scenario())
    assert (result, done) == (42, True)
    assert isinstance(held, asyncio.CancelledError)


def test_without_a_cancellation_the_result_comes_alone() -> None:
    async def scenario() -> tuple[str, object]:
        return await lifecycle.complete_to_thread(lambda: "written")

    assert asyncio.run(scenario()) == ("written", None)


def test_work_that_fails_after_a_cancellation_raises_the_cancellation_noting_it() -> None:
    async def scenario() -> None:
        async def work() -> int:
            await asyncio.sleep(0.01)
            raise OSError("disk full")

        await _cancelled_while_waiting(asyncio.create_task(work()))

    with pytest.raises(asyncio.CancelledError) as caught:
        asyncio.run(scenario())
    assert caught.value.__notes__ == ["operation also failed: disk full"]
    assert isinstance(caught.value.__cause__, OSError)


def test_work_that_fails_without_a_cancellation_raises_its_own_error() -> None:
    def fail() -> None:
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        asyncio.run(lifecycle.complete_to_thread(fail))


def test_a_failed_cleanup_is_raised_beside_the_first_failure() -> None:
    primary = ValueError("bad batch")

    async def fine() -> None:
        return None

    async def broken() -> None:
        raise RuntimeError("port still bound")

    assert asyncio.run(lifecycle.cleanup_after_failure(primary, fine, message="x")) is None
    with pytest.raises(BaseExceptionGroup) as caught:
        asyncio.run(lifecycle.cleanup_after_failure(primary, broken, message="start failed"))
    group = caught.value
    assert group.message == "start failed" and group.exceptions[0] is primary
    assert str(group.exceptions[1]) == "port still bound" and group.__cause__ is None


def test_a_seen_futures_error_is_not_reported_again() -> None:
    async def scenario() -> tuple[bool, bool]:
        loop = asyncio.get_running_loop()
        failed: asyncio.Future[None] = loop.create_future()
        failed.set_exception(RuntimeError("nobody awaits this"))
        cancelled: asyncio.Future[None] = loop.create_future()
        cancelled.cancel()
        for future in (failed, cancelled):
            lifecycle.consume_future_exception(future)
        return failed._log_traceback, cancelled.cancelled()

    assert asyncio.run(scenario()) == (False, True)


def _ready(command: str) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        ["sh", "-c", f"{command}; echo ready; exec sleep 30"],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert process.stdout is not None and process.stdout.readline() == "ready\n"
    return process


def test_a_process_group_ends_on_sigterm_or_after_the_grace_on_sigkill() -> None:
    polite = _ready("true")
    lifecycle.terminate_popen_process_group(polite, timeout=5)
    stubborn = _ready("trap '' TERM")
    lifecycle.terminate_popen_process_group(stubborn, timeout=0.1)
    assert (polite.returncode, stubborn.returncode) == (-signal.SIGTERM, -signal.SIGKILL)
    lifecycle.terminate_popen_process_group(polite, timeout=0.1)  # gone already: no error
    lifecycle.kill_process_group(polite.pid, signal.SIGTERM)


def test_an_asyncio_child_is_ended_and_reaped_from_synchronous_code() -> None:
    async def scenario() -> int:
        process = await asyncio.create_subprocess_exec(
            "sh", "-c", "trap '' TERM; exec sleep 30", start_new_session=True
        )
        await asyncio.sleep(0.05)  # the trap is set
        lifecycle.terminate_asyncio_process_group(process, timeout=0.1)
        return process.pid

    pid = asyncio.run(scenario())
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reaped


def test_the_supervisor_reports_a_child_that_exits_unless_closing() -> None:
    crashing = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])

    async def scenario() -> tuple[list[str], str, list[str]]:
        seen: list[str] = []
        reported = asyncio.Event()

        def report(error: RuntimeError) -> None:
            seen.append(str(error))
            reported.set()

        supervisor = lifecycle.ChildProcessSupervisor(report)
        supervisor.raise_if_failed()
        supervisor.watch_popen("vllm", crashing, log_path="/logs/vllm.log")
        await reported.wait()
        with pytest.raises(RuntimeError) as caught:
            supervisor.raise_if_failed()

        quiet: list[str] = []
        closing = lifecycle.ChildProcessSupervisor(lambda error: quiet.append(str(error)))
        child = await asyncio.create_subprocess_exec("sleep", "30")
        closing.watch_asyncio_process("trainer", child, log_path="/logs/t.log")
        await asyncio.sleep(0.01)
        closing.close()
        child.kill()
        await child.wait()
        await asyncio.sleep(0.01)
        return seen, str(caught.value), quiet

    seen, raised, quiet = asyncio.run(scenario())
    assert seen == ["vllm exited with code 3. Check logs at /logs/vllm.log"] == [raised]
    assert quiet == []


def test_the_service_closes_once_on_a_signal_then_the_old_handler_runs() -> None:
    calls: list[str] = []

    def earlier(signum: int, frame: FrameType | None) -> None:
        calls.append(f"earlier {signum}")

    before = signal.signal(signal.SIGTERM, earlier)
    service = lifecycle.ServiceLifecycle()
    try:
        service.install_parent_cleanup(lambda: calls.append("close"))
        service.install_parent_cleanup(lambda: calls.append("second close"))
        os.kill(os.getpid(), signal.SIGTERM)
        assert calls == ["close", f"earlier {signal.SIGTERM}"]
        assert (service.begin_close(), service.begin_close(), service.closing) == (
            True,
            False,
            True,
        )
        service.restore_parent_cleanup()
        assert signal.getsignal(signal.SIGTERM) is earlier
    finally:
        signal.signal(signal.SIGTERM, before)


def test_without_an_old_handler_a_signal_ends_the_program_after_closing() -> None:
    calls: list[str] = []
    before = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    service = lifecycle.ServiceLifecycle()
    try:
        service.install_parent_cleanup(lambda: calls.append("close"))
        with pytest.raises(SystemExit) as caught:
            os.kill(os.getpid(), signal.SIGTERM)
        assert (caught.value.code, calls) == (128 + signal.SIGTERM, ["close"])
    finally:
        service.restore_parent_cleanup()
        signal.signal(signal.SIGTERM, before)
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def test_arts_managed_process_wrapper_is_arthexs_supervisor() -> None:
    """What it runs is tested with real processes in tests/faults/test_managed_process.py."""
    wrapped = lifecycle.managed_process_cmd(["true"])
    assert wrapped[1:3] == ["-m", "arthex.utils.managed_process"]
    assert wrapped[wrapped.index("--parent-pid") + 1] == str(os.getpid())
