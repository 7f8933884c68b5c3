"""The inference server on loopback with the tiny model, through the real `openai` client."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

pytest.importorskip("torch")
pytest.importorskip("fastapi")

import httpx
import openai

from arthex.adapters.inference.engine import SamplingParams
from arthex.adapters.inference.http_server import InferenceServer
from arthex.adapters.inference.torch_engine import TorchEngine
from arthex.testing.tiny_model import tiny_model

pytestmark = pytest.mark.e2e

T = TypeVar("T")
KEY = "test-key"
MESSAGES: list[Any] = [
    {"role": "system", "content": "You answer with a number."},
    {"role": "user", "content": "What is two plus two?"},
]
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two numbers",
            "parameters": {"type": "object", "properties": {"a": {"type": "number"}}},
        },
    }
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def serve(
    model_dir: str,
    body: Callable[[TorchEngine, InferenceServer, openai.AsyncOpenAI], Awaitable[T]],
) -> T:
    async def main() -> T:
        engine = TorchEngine(model_dir)
        await engine.load("agent@0", None)
        engine.alias("agent", "agent@0")
        async with InferenceServer(engine, api_key=KEY) as server:
            client = openai.AsyncOpenAI(base_url=server.base_url, api_key=KEY, max_retries=0)
            try:
                return await body(engine, server, client)
            finally:
                await client.close()
                await engine.close()

    return asyncio.run(main())


def test_models_and_health(model_dir: str) -> None:
    async def body(
        engine: TorchEngine, server: InferenceServer, client: openai.AsyncOpenAI
    ) -> None:
        assert server.base_url.startswith("http://127.0.0.1:")
        assert server.base_url.endswith("/v1")
        models = await client.models.list()
        assert sorted(model.id for model in models.data) == ["agent", "agent@0"]
        async with httpx.AsyncClient() as http:
            health = await http.get(server.base_url.removesuffix("/v1") + "/health")
        assert health.status_code == 200
        assert health.json() == {"status": "ok"}

    serve(model_dir, body)


def test_completion_carries_logprobs_and_token_ids(model_dir: str) -> None:
    async def body(
        engine: TorchEngine, server: InferenceServer, client: openai.AsyncOpenAI
    ) -> None:
        response = await client.chat.completions.create(
            model="agent",
            messages=MESSAGES,
            logprobs=True,
            top_logprobs=2,
            max_tokens=12,
            temperature=0.8,
            seed=1,
        )
        assert response.model == "agent"
        (choice,) = response.choices
        extra = choice.model_extra or {}
        assert extra["prompt_token_ids"] == engine.render_chat("agent", MESSAGES, None)
        token_ids = extra["token_ids"]
        assert choice.logprobs is not None
        content = choice.logprobs.content or []
        assert len(token_ids) == len(content) > 0
        assert [entry.token for entry in content] == [f"token_id:{t}" for t in token_ids]
        assert all(entry.logprob <= 0 and len(entry.top_logprobs) == 2 for entry in content)
        assert choice.message.content == engine.decode("agent", token_ids)
        assert choice.finish_reason in ("stop", "length")
        assert response.usage is not None
        assert response.usage.prompt_tokens == len(extra["prompt_token_ids"])
        assert response.usage.completion_tokens == len(token_ids)

        # The same request gives the same logprobs the engine computes directly.
        samples = await engine.sample(
            "agent@0",
            extra["prompt_token_ids"],
            1,
            SamplingParams(max_tokens=12, temperature=0.8, seed=1, top_logprobs=2),
        )
        assert list(samples[0].token_ids) == token_ids
        assert [e.logprob for e in content] == pytest.approx(list(samples[0].logprobs), abs=1e-5)

        # A request that never mentions logprobs still gets them, with the token ids, so
        # rollout code written for ART (which never asks) can be trained.
        plain = await client.chat.completions.create(
            model="agent@0", messages=MESSAGES, max_completion_tokens=4, temperature=0.8, seed=1
        )
        plain_ids = (plain.choices[0].model_extra or {})["token_ids"]
        assert 0 < len(plain_ids) <= 4
        assert plain.choices[0].logprobs is not None
        plain_content = plain.choices[0].logprobs.content or []
        assert [e.logprob for e in plain_content] == pytest.approx(
            list(samples[0].logprobs)[: len(plain_ids)], abs=1e-5
        )
        assert all(entry.top_logprobs == [] for entry in plain_content)

        # Told not to, it leaves them out: logprobs=false, and vLLM's return_token_ids=false.
        bare = await client.chat.completions.create(
            model="agent@0",
            messages=MESSAGES,
            max_completion_tokens=4,
            logprobs=False,
            extra_body={"return_token_ids": False},
        )
        assert bare.choices[0].logprobs is None
        assert "token_ids" not in (bare.choices[0].model_extra or {})
        assert "prompt_token_ids" not in (bare.model_extra or {})

    serve(model_dir, body)


def test_n_choices_tools_and_stop(model_dir: str) -> None:
    async def body(
        engine: TorchEngine, server: InferenceServer, client: openai.AsyncOpenAI
    ) -> None:
        response = await client.chat.completions.create(
            model="agent", messages=MESSAGES, n=3, max_tokens=6, logprobs=True, seed=4
        )
        assert [choice.index for choice in response.choices] == [0, 1, 2]
        ids = [(choice.model_extra or {})["token_ids"] for choice in response.choices]
        assert len({tuple(token_ids) for token_ids in ids}) > 1

        with_tools = await client.chat.completions.create(
            model="agent", messages=MESSAGES, tools=TOOLS, max_tokens=3
        )
        prompt = (with_tools.choices[0].model_extra or {})["prompt_token_ids"]
        assert prompt == engine.render_chat("agent", MESSAGES, TOOLS)
        assert prompt != engine.render_chat("agent", MESSAGES, None)
        assert '"name": "add"' in engine.decode("agent", prompt)

        greedy = await client.chat.completions.create(
            model="agent", messages=MESSAGES, temperature=0, max_tokens=30
        )
        text = greedy.choices[0].message.content or ""
        stop = text[3:5]
        assert len(stop) == 2
        stopped = await client.chat.completions.create(
            model="agent", messages=MESSAGES, temperature=0, max_tokens=30, stop=[stop]
        )
        assert stopped.choices[0].finish_reason == "stop"
        assert stopped.choices[0].message.content == text[: text.index(stop)]

    serve(model_dir, body)


def test_auth_unknown_models_and_bad_bodies_get_json_errors(model_dir: str) -> None:
    async def body(
        engine: TorchEngine, server: InferenceServer, client: openai.AsyncOpenAI
    ) -> None:
        for key in ("wrong-key", KEY + "x"):
            stranger = openai.AsyncOpenAI(base_url=server.base_url, api_key=key, max_retries=0)
            with pytest.raises(openai.AuthenticationError):
                await stranger.models.list()
            await stranger.close()
        with pytest.raises(openai.NotFoundError, match="not served"):
            await client.chat.completions.create(model="agent@9", messages=MESSAGES)

        url = server.base_url + "/chat/completions"
        good = {"model": "agent", "messages": MESSAGES, "max_tokens": 2}
        auth = {"Authorization": f"Bearer {KEY}"}
        async with httpx.AsyncClient() as http:
            assert (await http.get(server.base_url + "/models")).status_code == 401
            assert (await http.post(url, json=good)).status_code == 401
            cases: list[tuple[bytes, int, str]] = [
                (b"{not json", 400, "not valid JSON"),
                (b"[1, 2]", 400, "JSON object"),
                (json.dumps({**good, "n": "3"}).encode(), 400, "n"),
                (json.dumps({**good, "messages": []}).encode(), 400, "messages"),
                (json.dumps({**good, "messages": [{"content": "x"}]}).encode(), 400, "role"),
                (json.dumps({**good, "temperature": 7}).encode(), 400, "temperature"),
                (json.dumps({**good, "stream": True}).encode(), 400, "stream"),
                (
                    json.dumps({**good, "top_logprobs": 3, "logprobs": False}).encode(),
                    400,
                    "logprobs",
                ),
                (json.dumps({"messages": MESSAGES}).encode(), 400, "model"),
                (b"x" * (9 * 1024 * 1024), 413, "larger"),
            ]
            for raw, status, word in cases:
                response = await http.post(url, content=raw, headers=auth)
                assert response.status_code == status, (raw[:60], response.text)
                assert word in response.json()["error"]["message"]
            # Still serving after all that.
            ok = await http.post(url, json=good, headers=auth)
            assert ok.status_code == 200
            assert ok.json()["choices"][0]["token_ids"]

    serve(model_dir, body)


def test_name_at_step_serves_that_steps_weights(model_dir: str, tmp_path: Path) -> None:
    import torch
    from safetensors.torch import save_model
    from transformers import AutoModelForCausalLM

    for step in (1, 2):
        model = AutoModelForCausalLM.from_pretrained(model_dir)
        torch.manual_seed(step)
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.add_(torch.randn_like(parameter) * 0.05)
        (tmp_path / f"{step:04d}").mkdir()
        save_model(model, str(tmp_path / f"{step:04d}" / "model.safetensors"))

    async def body(
        engine: TorchEngine, server: InferenceServer, client: openai.AsyncOpenAI
    ) -> None:
        await engine.load("agent@1", str(tmp_path / "0001"))
        await engine.load("agent@2", str(tmp_path / "0002"))
        await engine.unload("agent")
        engine.alias("agent", "agent@2")
        served = sorted(model.id for model in (await client.models.list()).data)
        assert served == ["agent", "agent@0", "agent@1", "agent@2"]
        logprobs: dict[str, list[float]] = {}
        for name in ("agent@0", "agent@1", "agent@2", "agent"):
            response = await client.chat.completions.create(
                model=name, messages=MESSAGES, temperature=0, max_tokens=8, logprobs=True
            )
            content = response.choices[0].logprobs
            assert content is not None
            logprobs[name] = [entry.logprob for entry in content.content or []]
        assert logprobs["agent"] == logprobs["agent@2"]
        assert logprobs["agent@1"] != logprobs["agent@2"]
        assert logprobs["agent@0"] != logprobs["agent@1"]

    serve(model_dir, body)


def test_sixteen_concurrent_requests_all_succeed_in_shared_batches(model_dir: str) -> None:
    async def body(
        engine: TorchEngine, server: InferenceServer, client: openai.AsyncOpenAI
    ) -> None:
        before = engine.batches_run
        responses = await asyncio.gather(
            *(
                client.chat.completions.create(
                    model="agent",
                    messages=[{"role": "user", "content": f"Task {i}"}],
                    max_tokens=8,
                    logprobs=True,
                )
                for i in range(16)
            )
        )
        assert len(responses) == 16
        for response in responses:
            extra = response.choices[0].model_extra or {}
            assert len(extra["token_ids"]) == len(response.choices[0].logprobs.content or [])  # type: ignore[union-attr]
        assert engine.batches_run - before < 16

    serve(model_dir, body)


def test_a_server_whose_loop_ended_serves_the_next_loop_until_it_is_stopped(
    model_dir: str,
) -> None:
    """A second `asyncio.run` takes the server over (same socket) once it follows; a stopped
    server is not brought back by following."""
    engine = TorchEngine(model_dir)
    server = InferenceServer(engine, api_key=KEY)
    url = asyncio.run(server.start())
    health = url.removesuffix("/v1") + "/health"

    async def follow_and_ask() -> int:
        server.follow_running_loop()
        async with httpx.AsyncClient(timeout=60.0) as http:
            return (await http.get(health)).status_code

    assert asyncio.run(follow_and_ask()) == 200
    assert asyncio.run(follow_and_ask()) == 200  # and again from a third loop

    async def stop_then_follow() -> None:
        server.follow_running_loop()
        await server.stop()
        server.follow_running_loop()
        async with httpx.AsyncClient(timeout=60.0) as http:
            with pytest.raises(httpx.ConnectError):
                await http.get(health)

    asyncio.run(stop_then_follow())
    asyncio.run(engine.close())


def test_an_idle_connection_stays_open_past_the_openai_clients_own_keep_alive(
    model_dir: str,
) -> None:
    """The server does not close a kept-alive connection while the client may still reuse it
    (it did at 5 s, the very expiry of the client's pool: a request sent as it closed got no
    answer)."""
    from openai._constants import DEFAULT_CONNECTION_LIMITS

    from tests._serverless import statuses_around_an_idle_wait

    expiry = DEFAULT_CONNECTION_LIMITS.keepalive_expiry
    assert expiry is not None

    async def body(
        engine: TorchEngine, server: InferenceServer, client: openai.AsyncOpenAI
    ) -> None:
        url = server.base_url.removesuffix("/v1")
        statuses = await statuses_around_an_idle_wait(url, "/health", expiry + 1.0)
        assert statuses == [b"HTTP/1.1 200 OK"] * 2

    serve(model_dir, body)
