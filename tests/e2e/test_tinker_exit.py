"""A process that used TinkerBackend against the tinker emulator exits cleanly, whether or not
it closed them: no thread but the main one is left when the interpreter finalizes.

A daemon thread still running then is ended by `pthread_exit` the next time it takes the GIL,
which aborts the process (`terminate called without an active exception`, after every test
passed) when a C++ frame is on its stack. The SDK's event-loop thread (sessions' heartbeats,
pollers) and the emulator's connection threads (the SDK keeps its connections open) were
such threads. Each test runs a real process and reads what its last exit hook saw.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("tinker")
pytest.importorskip("torch")

pytestmark = [pytest.mark.e2e, pytest.mark.faults]

REPO = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import atexit, sys, threading

    def report() -> None:
        left = sorted(t.name for t in threading.enumerate() if t is not threading.main_thread())
        sys.stderr.write(f"threads at exit: {left}\\n")
        # What finalization does next: the SDK's loop is closed, then each holder still
        # open schedules its cleanup on it from __del__ ("Event loop is closed").
        import gc
        from tinker.lib import internal_client_holder as sdk

        holders = [o for o in gc.get_objects() if isinstance(o, sdk.InternalClientHolder)]
        still_open = [h for h in holders if not h._closed]
        sys.stderr.write(f"holders at exit: {len(holders)}, open: {len(still_open)}\\n")
        loop = sdk._internal_client_holder_thread_singleton._loop
        if loop is not None and not loop.is_running():
            loop.close()
        for holder in still_open:
            holder.__del__()

    atexit.register(report)  # registered first, so it runs after every other exit hook

    import asyncio
    from arthex.adapters.tinker import TinkerBackend
    from arthex.core.config import TrainConfig
    from arthex.core.identity import ModelSpec, RunRef
    from arthex.emulators.tinker import TinkerEmulator
    from arthex.testing.builders import synthetic_groups

    close, tiny, runs = sys.argv[1] == "close", sys.argv[2], sys.argv[3]
    emulator = TinkerEmulator(tiny, api_key="tml-exit", torch_threads=1)
    emulator.start()
    backend = TinkerBackend(base_url=emulator.base_url, api_key="tml-exit", timeout_s=120)
    spec = ModelSpec(RunRef("exit", "agent"), base_model=tiny, base_path=runs)

    async def main() -> int:
        await backend.register(spec)
        config = TrainConfig(learning_rate=1e-3)
        for _ in range(2):
            async for _ in backend.train_steps(spec.run, synthetic_groups(1), config):
                pass
        await backend.checkpoint_steps(spec.run)  # a RestClient too
        step = await backend.get_step(spec.run)
        if close:
            await backend.close()
        return step

    print(f"trained to step {asyncio.run(main())}", flush=True)
    if close:
        emulator.stop()
        left = sorted(t.name for t in threading.enumerate() if "emulator" in t.name)
        print(f"emulator threads after stop: {left}", flush=True)
    """
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    from arthex.testing.tiny_model import tiny_model

    return tiny_model(tmp_path_factory.getbasetemp() / "tiny-model")


def run_script(mode: str, tiny: str, runs: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TINKER_TELEMETRY": "0", "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, mode, tiny, str(runs)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def assert_quiet(stderr: str) -> None:
    """Every SDK holder was closed before the SDK's loop went, and nothing was printed about
    it: no "Exception ignored ... Event loop is closed", no failing heartbeat."""
    assert ", open: 0" in stderr, stderr[-3000:]
    for noise in ("Exception ignored", "Event loop is closed", "heartbeat", "Traceback"):
        assert noise not in stderr, stderr[-3000:]


def test_a_process_that_never_closes_its_tinker_backend_or_emulator_exits_cleanly(
    tiny: str, tmp_path: Path
) -> None:
    done = run_script("leave-open", tiny, tmp_path)
    assert "trained to step 2" in done.stdout, done.stderr[-3000:]
    assert_quiet(done.stderr)
    assert "terminate called" not in done.stderr, done.stderr[-3000:]
    assert "threads at exit: []" in done.stderr, done.stderr[-3000:]
    assert done.returncode == 0, done.stderr[-3000:]


def test_a_process_that_closes_its_tinker_backend_and_emulator_exits_cleanly(
    tiny: str, tmp_path: Path
) -> None:
    done = run_script("close", tiny, tmp_path)
    assert "trained to step 2" in done.stdout, done.stderr[-3000:]
    assert_quiet(done.stderr)
    assert "emulator threads after stop: []" in done.stdout, done.stdout
    assert "terminate called" not in done.stderr, done.stderr[-3000:]
    assert "threads at exit: []" in done.stderr, done.stderr[-3000:]
    assert done.returncode == 0, done.stderr[-3000:]


def test_an_emulator_that_cannot_bind_leaves_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A start that fails after the model is loaded (the port is taken) releases what it had
    made: the compute and server threads, its temp state folder, torch's thread count."""
    import socket
    import tempfile
    import threading

    import torch

    from arthex.emulators.tinker import TinkerEmulator
    from arthex.testing.tiny_model import tiny_model

    tiny = tiny_model(tmp_path / "tiny")
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    threads_before = {t.name for t in threading.enumerate()}
    torch_threads = torch.get_num_threads()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        emulator = TinkerEmulator(
            tiny, port=port, torch_threads=torch_threads + 1, api_key="tml-bind"
        )
        with pytest.raises(Exception, match=str(port)):
            emulator.start()
    assert torch.get_num_threads() == torch_threads
    assert list(temp.iterdir()) == []
    assert {t.name for t in threading.enumerate()} <= threads_before
