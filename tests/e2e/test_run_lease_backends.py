"""The run lease's life in one process, on every backend: the LocalBackend, Tinker (against its
emulator), the training server (`arthex serve` on loopback, over the LocalBackend) and the
in-memory one.

- A second live model of the process on the run is refused, naming this process and the line
  that registered the first; nothing is trained.
- `backend.close()` (and no `model.close()`, as ART's scripts end) frees the run: the second
  model registers, on a backend of its own, and trains on from the first's step.
- A model dropped without `close` (its backend still open) frees the run once collected.
- The training server restarted (SIGTERM, then SIGKILL) under a client: a new model object,
  on the same backend object and then on a new one, takes the run back at once and trains on.
"""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("fastapi")

import arthex
from arthex.core.errors import RunBusyError
from arthex.ports.training_backend import TrainingBackend
from arthex.testing.builders import synthetic_groups
from arthex.testing.fakes.backend import InMemoryBackend
from arthex.testing.tiny_model import tiny_model
from tests._serverless import ServerProcess, launch_server, start_server

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TINKER_KEY = "tml-lease"
CONFIG = arthex.TrainConfig(learning_rate=1e-3)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    return tiny_model(tmp_path_factory.getbasetemp() / "tiny-model")


@pytest.fixture(scope="module")
def server(tiny: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    running = start_server(tmp_path_factory.mktemp("server") / "state", backend="local")
    try:
        yield running
    finally:
        running.stop()


def local_backends(tiny: str, request: pytest.FixtureRequest) -> Callable[[], TrainingBackend]:
    from arthex.adapters.local import LocalBackend

    return lambda: LocalBackend()


def tinker_backends(tiny: str, request: pytest.FixtureRequest) -> Callable[[], TrainingBackend]:
    pytest.importorskip("tinker")
    from arthex.adapters.tinker import TinkerBackend
    from arthex.emulators.tinker import TinkerEmulator

    monkeypatch = request.getfixturevalue("monkeypatch")
    monkeypatch.setenv("TINKER_TELEMETRY", "0")
    state = request.getfixturevalue("tmp_path") / "tinker-state"
    emulator = TinkerEmulator(tiny, api_key=TINKER_KEY, state_dir=str(state), torch_threads=1)
    emulator.__enter__()
    request.addfinalizer(lambda: emulator.__exit__(None, None, None))
    return lambda: TinkerBackend(
        base_url=emulator.base_url, api_key=TINKER_KEY, timeout_s=120.0, serve=False
    )


def serverless_backends(tiny: str, request: pytest.FixtureRequest) -> Callable[[], TrainingBackend]:
    from arthex.adapters.serverless import ServerlessBackend

    running: ServerProcess = request.getfixturevalue("server")
    key = running.fresh_key()
    return lambda: ServerlessBackend(running.url, key, poll_wait_s=1.0)


def inmemory_backends(tiny: str, request: pytest.FixtureRequest) -> Callable[[], TrainingBackend]:
    return lambda: InMemoryBackend(one_trainer=True)


KINDS = {
    "local": local_backends,
    "tinker": tinker_backends,
    "serverless": serverless_backends,
    "inmemory": inmemory_backends,
}


def make_model(tiny: str, base: Path) -> arthex.TrainableModel:
    return arthex.TrainableModel(
        name="agent", project="lease", base_model=tiny, base_path=str(base), report_metrics=[]
    )


@pytest.mark.parametrize("kind", list(KINDS))
def test_the_run_comes_back_when_the_backend_closes_or_the_model_is_dropped(
    kind: str, tiny: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    backends = KINDS[kind](tiny, request)
    # the in-memory backend keeps its checkpoints in memory: a new one starts at step 0
    carries_steps = kind != "inmemory"
    open_backends: list[TrainingBackend] = []

    def new_backend() -> TrainingBackend:
        open_backends.append(backends())
        return open_backends[-1]

    async def scenario() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        try:
            first_backend = new_backend()
            first = make_model(tiny, tmp_path)
            seen["line"] = sys._getframe().f_lineno + 1
            await first.register(first_backend)
            await first.train(synthetic_groups(), config=CONFIG)

            second = make_model(tiny, tmp_path)
            with pytest.raises(RunBusyError) as refused:
                await second.register(new_backend())
            seen["refused"] = str(refused.value)
            del refused  # its traceback's frames hold `second`, which is dropped below
            seen["step after refusal"] = await first.get_step()

            await first_backend.close()  # no first.close(), as ART's scripts end
            await second.register(new_backend())
            seen["second starts at"] = await second.get_step()
            seen["second reaches"] = (await second.train(synthetic_groups(1), config=CONFIG)).step

            dropped = weakref.ref(second)
            del second  # its backend stays open (and referenced): only the model goes
            gc.collect()
            seen["collected"] = dropped() is None
            third = make_model(tiny, tmp_path)
            await third.register(new_backend())
            seen["third reaches"] = (await third.train(synthetic_groups(2), config=CONFIG)).step
            await third.close()
            return seen
        finally:
            for backend in open_backends:
                await backend.close()

    seen = asyncio.run(scenario())
    message = seen["refused"]
    assert "another model of this process" in message, message
    assert f"pid {os.getpid()} on host" in message
    assert f"{__file__}:{seen['line']}" in message, message
    assert seen["step after refusal"] == 1
    assert seen["collected"], "nothing may keep a dropped model alive"
    if carries_steps:
        assert seen["second starts at"] == 1
        assert (seen["second reaches"], seen["third reaches"]) == (2, 3)


def test_a_client_rides_through_server_restarts_with_new_model_objects(
    tiny: str, tmp_path: Path
) -> None:
    """The server is stopped with SIGTERM and restarted on the same port and state, then
    SIGKILLed and restarted: each time the script (a notebook re-running its cell) makes a new
    model object on the same run, dropping the old one without closing anything. The first
    time it keeps its backend object, the second time it makes a new one too."""
    from arthex.adapters.serverless import ServerlessBackend

    first = start_server(tmp_path / "state", backend="local")
    servers = [first]
    port = first.url.rsplit(":", 1)[1]
    key = first.fresh_key()

    def restart(kill: bool) -> None:
        servers[-1].stop(kill=kill)
        pending = launch_server(
            first.state_dir, backend="local", keys=first.keys, extra_args=["--port", port]
        )
        servers.append(pending.wait())
        assert servers[-1].url == first.url

    async def scenario() -> list[int]:
        steps = []
        backends = [ServerlessBackend(first.url, key, poll_wait_s=1.0)]
        try:
            model = make_model(tiny, tmp_path / "client")
            await model.register(backends[-1])
            steps.append((await model.train(synthetic_groups(), config=CONFIG)).step)

            restart(kill=False)  # SIGTERM
            model = make_model(tiny, tmp_path / "client")  # the cell again; same backend
            await model.register(backends[-1])
            steps.append((await model.train(synthetic_groups(1), config=CONFIG)).step)

            restart(kill=True)  # SIGKILL
            backends.append(ServerlessBackend(first.url, key, poll_wait_s=1.0))
            model = make_model(tiny, tmp_path / "client")  # the cell again; a new backend
            await model.register(backends[-1])
            steps.append((await model.train(synthetic_groups(2), config=CONFIG)).step)
            return steps
        finally:
            for backend in backends:
                await backend.close()

    try:
        assert asyncio.run(scenario()) == [1, 2, 3]
    finally:
        servers[-1].stop()
