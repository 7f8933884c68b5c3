"""A Tinker server killed with SIGKILL and restarted on the same state dir and port, with the
unmodified tinker SDK as the client: every checkpoint saved before a kill is listed and loads,
one killed mid-save is never listed, a request in flight at a kill fails with the SDK's
retryable error, and a run resumed from its last saved state trains on exactly as a run that
was never killed (the oracle: one trained in another server with the same data and seed).

The kills land at known points through the server's test-only hold (`ARTHEX_TINKER_TEST_HOLD`,
store.py): the test asks for a hold, sends the request, waits until the server says it holds
there (the save's files written, or the step computed and its answer not yet given), and
kills it.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("tinker")
pytest.importorskip("torch")

import tinker
from tinker import types
from tinker.lib.retryable_exception import RetryableException

from arthex.emulators.tinker import TinkerEmulator
from tests._tinker import ServerProcess, free_port, server_process

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("error::FutureWarning:tinker"),
    pytest.mark.filterwarnings("error::DeprecationWarning:tinker"),
]

KEY = "tml-kill-0123456789abcdef"  # a server key is at least 16 characters
TIMEOUT_S = 180.0
SEED, RANK = 11, 4
ADAM = types.AdamParams(learning_rate=2e-2)
SEQUENCES = ([1, 12, 13, 40, 41, 42, 43], [1, 14, 15, 50, 51, 52])
HOLD_WAIT_S = 120.0


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    from arthex.testing.tiny_model import tiny_model

    return tiny_model(tmp_path_factory.getbasetemp() / "tiny-model")


@pytest.fixture(autouse=True)
def _no_telemetry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TINKER_TELEMETRY", "0")


def datums() -> list[types.Datum]:
    return [
        types.Datum(
            model_input=types.ModelInput.from_ints(tokens[:-1]),
            loss_fn_inputs={
                "target_tokens": types.TensorData(data=tokens[1:], dtype="int64"),
                "weights": types.TensorData(
                    data=[0.0, 0.0, *[1.0] * (len(tokens) - 3)], dtype="float32"
                ),
            },
        )
        for tokens in SEQUENCES
    ]


def step(training: Any) -> float:
    """One forward_backward and optimizer step; the loss the forward_backward reported."""
    forward = training.forward_backward(datums(), "cross_entropy")
    optim = training.optim_step(ADAM)
    loss = float(forward.result(TIMEOUT_S).metrics["loss:sum"])
    optim.result(TIMEOUT_S)
    return loss


@pytest.fixture(scope="module")
def oracle(tiny: str) -> list[float]:
    """The losses of steps 1..4 of a run no one kills (another server, in this process)."""
    with (
        pytest.MonkeyPatch.context() as patch,
        TinkerEmulator(tiny, api_key=KEY, torch_threads=1) as emulator,
    ):
        patch.setenv("TINKER_TELEMETRY", "0")
        service = tinker.ServiceClient(base_url=emulator.base_url, api_key=KEY)
        try:
            training = service.create_lora_training_client(tiny, rank=RANK, seed=SEED)
            trained = training.result(TIMEOUT_S)
            return [step(trained) for _ in range(4)]
        finally:
            service.close("success").result(TIMEOUT_S)


class Hold:
    """The folder a test shares with the server's test-only hold."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder

    @property
    def env(self) -> dict[str, str]:
        return {"ARTHEX_TINKER_TEST_HOLD": str(self.folder)}

    def arm(self, point: str) -> None:
        (self.folder / f"{point}.held").unlink(missing_ok=True)
        (self.folder / point).touch()

    def wait(self, point: str, server: ServerProcess) -> None:
        deadline = time.monotonic() + HOLD_WAIT_S
        while not (self.folder / f"{point}.held").exists():
            assert server.process.poll() is None, server.output()
            assert time.monotonic() < deadline, f"the server never held at {point!r}"
            time.sleep(0.02)


def close(services: list[tinker.ServiceClient]) -> None:
    """Close the clients; the sessions of a killed server's clients are gone with it."""
    for service in services:
        with contextlib.suppress(Exception):
            service.close("success").result(30)


def listed(url: str, run_id: str) -> set[str]:
    answer = tinker.RestClient(base_url=url, api_key=KEY).list_checkpoints(run_id).result(TIMEOUT_S)
    return {checkpoint.tinker_path for checkpoint in answer.checkpoints}


def test_a_killed_server_resumes_from_every_saved_checkpoint_as_if_never_killed(
    tiny: str, tmp_path: Path, oracle: list[float]
) -> None:
    state, port, hold = tmp_path / "state", free_port(), Hold(tmp_path / "hold")
    log = tmp_path / "server.log"

    def serve() -> contextlib.AbstractContextManager[ServerProcess]:
        return server_process(tiny, port=port, state_dir=state, key=KEY, log=log, env=hold.env)

    # Life 1: two steps with their checkpoints, then a kill while a third save is being written.
    clients: list[tinker.ServiceClient] = []
    with serve() as first:
        service = tinker.ServiceClient(base_url=first.url, api_key=KEY)
        clients.append(service)
        training = service.create_lora_training_client(tiny, rank=RANK, seed=SEED)
        trained = training.result(TIMEOUT_S)
        assert step(trained) == pytest.approx(oracle[0], abs=1e-5)
        state1 = trained.save_state("s1").result(TIMEOUT_S).path
        sampler1 = trained.save_weights_for_sampler("w1").result(TIMEOUT_S).path
        assert step(trained) == pytest.approx(oracle[1], abs=1e-5)
        state2 = trained.save_state("s2").result(TIMEOUT_S).path
        run_id = state2.removeprefix("tinker://").split("/")[0]
        hold.arm("publish")
        saving = trained.save_state("s3")
        hold.wait("publish", first)
        first.kill()
    weights = state / "runs" / run_id / "weights"
    half = [p.name for p in weights.iterdir() if p.name.startswith(".tmp-s3")]
    assert half and (weights / half[0] / "meta.json").is_file()  # all written, not in place

    # Life 2: the same state dir and port.
    with serve() as second:
        after = tinker.ServiceClient(base_url=second.url, api_key=KEY)
        clients.append(after)
        assert listed(second.url, run_id) == {state1, sampler1, state2}
        assert not any(p.name.startswith(".tmp-") for p in weights.iterdir())  # swept
        with pytest.raises(RetryableException):
            saving.result(TIMEOUT_S)  # in flight at the kill: the SDK's retryable error
        # every saved state loads with its optimizer and trains on as the oracle did
        from_s1 = after.create_training_client_from_state_with_optimizer(state1)
        assert step(from_s1.result(TIMEOUT_S)) == pytest.approx(oracle[1], abs=1e-5)
        sampler = after.create_sampling_client(model_path=sampler1).result(TIMEOUT_S)
        prompt = types.ModelInput.from_ints(SEQUENCES[0][:3])
        sampled = sampler.sample(prompt, 1, types.SamplingParams(max_tokens=2, seed=1))
        assert sampled.result(TIMEOUT_S).sequences
        resuming = after.create_training_client_from_state_with_optimizer(state2)
        resumed = resuming.result(TIMEOUT_S)
        # A kill while a step is being computed: its work done, its answer not yet given.
        hold.arm("answer")
        stepping = resumed.forward_backward(datums(), "cross_entropy")
        hold.wait("answer", second)
        second.kill()

    # Life 3.
    with serve() as third:
        last = tinker.ServiceClient(base_url=third.url, api_key=KEY)
        clients.append(last)
        with pytest.raises(RetryableException):
            stepping.result(TIMEOUT_S)
        # The killed life's run is not trained on (its state died with it), and never
        # silently from another state: the SDK's next request on it is refused.
        with pytest.raises(tinker.BadRequestError):
            resumed.forward_backward(datums(), "cross_entropy").result(TIMEOUT_S)
        assert listed(third.url, run_id) == {state1, sampler1, state2}
        again = last.create_training_client_from_state_with_optimizer(state2)
        continued = again.result(TIMEOUT_S)
        losses = [step(continued), step(continued)]
        close(clients)
    assert losses == pytest.approx(oracle[2:], abs=1e-5)
