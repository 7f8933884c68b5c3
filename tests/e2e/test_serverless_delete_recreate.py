"""A deleted model registered again under the same names is a fresh model at step 0
(docs/backends/serverless.md), on a real `arthex serve --backend local` on loopback with the
tiny model, driven by arthex's ServerlessBackend client.

The same names get the same model id back, so the server's LocalBackend must not still hold
the deleted run open (its trainer with the trained weights, its engine serving the old steps).
The oracles are a model of the same base that was never trained (what step 0 must answer,
greedy, token for token and logprob for logprob) and the deleted model's own first step (what
one step from the base weights on the same groups gives)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from arthex.adapters.serverless import ServerlessBackend
from arthex.art.serverless.client import Client
from arthex.core.config import TrainConfig
from arthex.core.errors import NotRegisteredError
from arthex.core.identity import ModelSpec, RunRef
from arthex.ports.training_backend import InferenceEndpoint
from arthex.testing.builders import synthetic_groups
from tests._serverless import ServerProcess, launch_server

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PROMPT = [{"role": "user", "content": "Count from one to ten:"}]
CONFIG = TrainConfig(learning_rate=5e-2)  # large, so one step visibly moves the answers

Answer = tuple[tuple[str, ...], tuple[float, ...]]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    pytest.importorskip("torch")
    from arthex.testing.tiny_model import tiny_model

    pending = launch_server(tmp_path_factory.mktemp("again") / "state", backend="local")
    tiny_model(tmp_path_factory.getbasetemp() / "tiny-model")  # while the server imports torch
    started = pending.wait()
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory, server: ServerProcess) -> str:
    from arthex.testing.tiny_model import tiny_model

    return tiny_model(tmp_path_factory.getbasetemp() / "tiny-model")


async def greedy(endpoint: InferenceEndpoint, model: str) -> Answer:
    """The greedy completion's tokens and their logprobs, through the server's proxy."""
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key)
    try:
        response = await client.chat.completions.create(
            model=model,
            messages=PROMPT,  # type: ignore[arg-type]
            max_tokens=8,
            temperature=0.0,
            logprobs=True,
        )
    finally:
        await client.close()
    logprobs = response.choices[0].logprobs
    assert logprobs is not None and logprobs.content
    return tuple(t.token for t in logprobs.content), tuple(t.logprob for t in logprobs.content)


def close_to(a: Answer, b: Answer, tol: float = 1e-4) -> bool:
    return a[0] == b[0] and all(abs(x - y) <= tol for x, y in zip(a[1], b[1], strict=True))


async def train_once(backend: ServerlessBackend, run: RunRef) -> tuple[int, list[int]]:
    async for _ in backend.train_steps(run, synthetic_groups(), CONFIG):
        pass
    return await backend.get_step(run), await backend.checkpoint_steps(run)


def test_a_deleted_model_registered_again_starts_fresh_from_the_base_weights(
    server: ServerProcess, tiny: str
) -> None:
    _, key = server.fresh_tenant()
    run = RunRef("again", "agent")
    spec = ModelSpec(run=run, base_model=tiny)
    untouched = ModelSpec(run=RunRef("again", "untouched"), base_model=tiny)

    async def first_life() -> tuple[str, Answer, Answer, Answer]:
        backend = ServerlessBackend(server.url, key)
        try:
            base_endpoint = await backend.register(untouched)
            endpoint = await backend.register(spec)
            assert base_endpoint is not None and endpoint is not None
            base = await greedy(base_endpoint, base_endpoint.name_at(0))
            at_zero = await greedy(endpoint, endpoint.name_at(0))
            assert await train_once(backend, run) == (1, [0, 1])
            trained = await greedy(endpoint, endpoint.model_name)
            model_id = backend.remote_of(run)["model_id"]
        finally:
            await backend.close()  # gives the trainer lease back, so the delete is allowed
        async with Client(api_key=key, base_url=server.url + "/v1") as client:
            await client.models.delete(model_id=model_id)
            with pytest.raises(NotRegisteredError):  # gone from the server
                await client.models.checkpoints.list(model_id=model_id)
        return model_id, base, at_zero, trained

    model_id, base, at_zero, trained = asyncio.run(first_life())
    assert at_zero == base  # a never-trained model's step 0 is the base weights, exactly
    assert not close_to(trained, base)  # the step moved the answers: the oracle can tell

    async def second_life() -> tuple[str, tuple[int, list[int]], Answer, Answer, Answer]:
        backend = ServerlessBackend(server.url, key)
        try:
            endpoint = await backend.register(spec)
            assert endpoint is not None
            again = backend.remote_of(run)["model_id"]
            fresh = (await backend.get_step(run), await backend.checkpoint_steps(run))
            latest = await greedy(endpoint, endpoint.model_name)
            at_zero = await greedy(endpoint, endpoint.name_at(0))
            assert await train_once(backend, run) == (1, [0, 1])
            retrained = await greedy(endpoint, endpoint.model_name)
        finally:
            await backend.close()
        return again, fresh, latest, at_zero, retrained

    again, fresh, latest, at_zero_again, retrained = asyncio.run(second_life())
    assert again == model_id  # the same names get the same id back
    assert fresh == (0, [0])
    assert at_zero_again == base
    assert latest == base  # not the deleted model's trained weights
    # one step from the base weights on the same groups: what the deleted model's step 1 was
    assert close_to(retrained, trained)


def test_a_delete_racing_logs_samples_and_a_register_leaves_no_half_state(
    server: ServerProcess, tiny: str
) -> None:
    """Requests in flight when the delete comes each end one way or the other (done before
    it, or refused as unknown), and none of them re-opens the run or writes into its folder
    after the delete removed it; a register of the same names racing the delete waits for it
    and gets a fresh model."""
    import openai

    tenant, key = server.fresh_tenant()
    run = RunRef("race", "agent")
    spec = ModelSpec(run=run, base_model=tiny)
    untouched = ModelSpec(run=RunRef("race", "untouched"), base_model=tiny)

    async def trained_model() -> tuple[str, InferenceEndpoint, Answer]:
        backend = ServerlessBackend(server.url, key)
        try:
            base_endpoint = await backend.register(untouched)
            endpoint = await backend.register(spec)
            assert base_endpoint is not None and endpoint is not None
            base = await greedy(base_endpoint, base_endpoint.name_at(0))
            assert await train_once(backend, run) == (1, [0, 1])
            return backend.remote_of(run)["model_id"], endpoint, base
        finally:
            await backend.close()

    async def race(model_id: str, endpoint: InferenceEndpoint) -> list[object]:
        async with Client(api_key=key, base_url=server.url + "/v1") as client:
            logs = [
                client.models.log(
                    model_id=model_id, trajectory_groups=synthetic_groups(), split="val"
                )
                for _ in range(3)
            ]
            samples = [greedy(endpoint, endpoint.model_name) for _ in range(3)]
            deleting = client.models.delete(model_id=model_id)
            return list(await asyncio.gather(*logs, *samples, deleting, return_exceptions=True))

    model_id, endpoint, base = asyncio.run(trained_model())
    folder = server.state_dir / "backend" / tenant / "models" / model_id
    assert (folder / "checkpoints").is_dir()
    results = asyncio.run(race(model_id, endpoint))
    *logs, s1, s2, s3, deleted = results
    assert deleted is None  # the delete itself succeeded
    for outcome in logs:
        assert outcome is None or isinstance(outcome, NotRegisteredError), outcome
    for outcome in (s1, s2, s3):  # answered by the trained step, or refused as unknown
        assert isinstance(outcome, tuple | openai.NotFoundError), outcome
    assert not folder.exists()  # nothing wrote into the folder after it was removed

    async def create_racing_a_delete() -> tuple[str, tuple[int, list[int]], Answer]:
        old_id, _, _ = await trained_model()
        async with Client(api_key=key, base_url=server.url + "/v1") as client:
            # a create of the same names (no lease, so the delete is never refused) either
            # finds the model before the delete, or waits for the delete and makes it anew
            await asyncio.gather(
                client.models.delete(model_id=old_id),
                client.models.create(project="race", name="agent", base_model=tiny),
            )
        backend = ServerlessBackend(server.url, key)
        try:
            again = await backend.register(spec)
            assert again is not None
            fresh = (await backend.get_step(run), await backend.checkpoint_steps(run))
            return backend.remote_of(run)["model_id"], fresh, await greedy(again, again.model_name)
        finally:
            await backend.close()

    again_id, fresh, latest = asyncio.run(create_racing_a_delete())
    assert again_id == model_id
    assert fresh == (0, [0])
    assert latest == base
