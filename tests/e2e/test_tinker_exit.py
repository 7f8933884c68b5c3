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

    atexit.register(report)  # registered first, so it runs after every other exit hook

    import asyncio
    from arthex.adapters.tinker import TinkerBackend
    from arthex.core.config import TrainConfig
    from arthex.core.identity import ModelSpec, RunRef
    from arthex.emulators.tinker import TinkerEmulator
    from arthex.testing.contracts.training_backend import synthetic_groups

    close, tiny, runs = sys.argv[1] == "close", sys.argv[2], sys.argv[3]
    emulator = TinkerEmulator(tiny, api_key="tml-exit", torch_threads=1)
    emulator.start()
    backend = TinkerBackend(base_url=emulator.base_url, api_key="tml-exit", timeout_s=120)
    spec = ModelSpec(RunRef("exit", "agent"), base_model=tiny, base_path=runs)

    async def main() -> int:
        await backend.register(spec)
        config = TrainConfig(learning_rate=1e-3)
        async for _ in backend.train(spec.run, synthetic_groups(1), config):
            pass
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


def test_a_process_that_never_closes_its_tinker_backend_or_emulator_exits_cleanly(
    tiny: str, tmp_path: Path
) -> None:
    done = run_script("leave-open", tiny, tmp_path)
    assert "trained to step 1" in done.stdout, done.stderr[-3000:]
    assert "terminate called" not in done.stderr, done.stderr[-3000:]
    assert "threads at exit: []" in done.stderr, done.stderr[-3000:]
    assert done.returncode == 0, done.stderr[-3000:]


def test_a_process_that_closes_its_tinker_backend_and_emulator_exits_cleanly(
    tiny: str, tmp_path: Path
) -> None:
    done = run_script("close", tiny, tmp_path)
    assert "trained to step 1" in done.stdout, done.stderr[-3000:]
    assert "emulator threads after stop: []" in done.stdout, done.stdout
    assert "terminate called" not in done.stderr, done.stderr[-3000:]
    assert "threads at exit: []" in done.stderr, done.stderr[-3000:]
    assert done.returncode == 0, done.stderr[-3000:]
