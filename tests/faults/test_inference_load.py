"""The inference server under load and bad input, with the tiny model on CPU.

64 concurrent chat requests through the real `openai` client, clients that leave in the
middle of a request, requests that join a batch already generating, and fuzzed HTTP
requests. One server serves the whole module, on an event loop in a background thread;
the tests talk to it from their own threads, over loopback, as separate clients would.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from typing import Any, TypeVar

import pytest

pytest.importorskip("torch")
pytest.importorskip("fastapi")

import attrs
import httpx
import openai
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arthex.adapters.inference.engine import Sample, SamplingParams
from arthex.adapters.inference.http_server import InferenceServer
from arthex.adapters.inference.torch_engine import TorchEngine
from arthex.testing.tiny_model import tiny_model

pytestmark = pytest.mark.faults

T = TypeVar("T")
KEY = "load-test-key"
MAX_BODY = 64 * 1024
GOOD: dict[str, Any] = {
    "model": "agent",
    "messages": [{"role": "user", "content": "What is two plus two?"}],
    "max_tokens": 2,
}


@attrs.frozen
class Served:
    engine: TorchEngine
    base_url: str
    loop: asyncio.AbstractEventLoop
    model_dir: str

    @property
    def root(self) -> str:
        return self.base_url.removesuffix("/v1")

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float = 120) -> T:
        """Run on the server's loop (where the engine's tokenizer and batching live)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def render(self, messages: list[dict[str, Any]]) -> list[int]:
        async def render() -> list[int]:
            return self.engine.render_chat("agent", messages, None)

        return self.run(render())

    def decode(self, token_ids: Sequence[int]) -> str:
        async def decode() -> str:
            return self.engine.decode("agent", token_ids)

        return self.run(decode())

    def sample_alone(self, prompt: list[int], n: int, params: SamplingParams) -> list[Sample]:
        return self.run(self.engine.sample("agent", prompt, n, params))


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    model_dir = tiny_model(tmp_path_factory.mktemp("tiny") / "model")
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="inference-server", daemon=True)
    thread.start()

    async def start() -> tuple[TorchEngine, InferenceServer]:
        engine = TorchEngine(model_dir)
        await engine.load("agent@0", None)
        engine.alias("agent", "agent@0")
        server = InferenceServer(engine, api_key=KEY, max_body_bytes=MAX_BODY, default_max_tokens=4)
        await server.start()
        return engine, server

    engine, server = asyncio.run_coroutine_threadsafe(start(), loop).result(120)
    try:
        yield Served(engine, server.base_url, loop, model_dir)
    finally:

        async def stop() -> None:
            await server.stop()
            await engine.close()

        asyncio.run_coroutine_threadsafe(stop(), loop).result(60)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()


def client_for(served: Served) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=served.base_url, api_key=KEY, max_retries=0, timeout=120)


def wait_until(condition: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.005)


# load -------------------------------------------------------------------------------------


def test_64_concurrent_chat_requests_are_all_answered_well_formed(served: Served) -> None:
    """All 64 answered, in shared batches, each with token ids and logprobs that match the
    prompt and the text; /health and /v1/models answer while the completions are pending;
    a completion under load is the one the same seed gives alone."""
    conversations = [[{"role": "user", "content": f"Task {i}: count to {i}."}] for i in range(64)]
    prompts = [served.render(messages) for messages in conversations]
    from transformers import AutoTokenizer

    vocabulary = len(AutoTokenizer.from_pretrained(served.model_dir))
    batches_before = served.engine.batches_run

    async def load() -> tuple[list[Any], int, int, list[str]]:
        client = client_for(served)
        try:
            requests = [
                asyncio.ensure_future(
                    client.chat.completions.create(
                        model="agent",
                        messages=messages,  # type: ignore[arg-type]
                        max_tokens=24,
                        logprobs=True,
                        top_logprobs=2,
                        seed=i,
                    )
                )
                for i, messages in enumerate(conversations)
            ]
            async with httpx.AsyncClient(base_url=served.root, timeout=60) as http:
                await asyncio.sleep(0.05)
                health = await http.get("/health")
                listed = [model.id for model in (await client.models.list()).data]
                pending = sum(not request.done() for request in requests)
            return await asyncio.gather(*requests), health.status_code, pending, listed
        finally:
            await client.close()

    responses, health, pending, listed = asyncio.run(load())
    assert health == 200
    assert sorted(listed) == ["agent", "agent@0"]
    assert pending > 0  # the server answered those while completions were outstanding
    assert served.engine.batches_run - batches_before < 64

    for i, response in enumerate(responses):
        (choice,) = response.choices
        extra = choice.model_extra or {}
        token_ids = extra["token_ids"]
        assert extra["prompt_token_ids"] == prompts[i]
        assert 1 <= len(token_ids) <= 24
        assert all(isinstance(t, int) and 0 <= t < vocabulary for t in token_ids)
        assert choice.finish_reason in ("stop", "length")
        assert choice.message.content == served.decode(token_ids)
        assert response.usage is not None
        assert response.usage.completion_tokens == len(token_ids)
        assert choice.logprobs is not None
        content = choice.logprobs.content or []
        assert [entry.token for entry in content] == [f"token_id:{t}" for t in token_ids]
        for entry in content:
            assert math.isfinite(entry.logprob) and entry.logprob <= 0
            tops = [top.logprob for top in entry.top_logprobs]
            assert len(tops) == 2 and tops[0] >= tops[1]
            assert entry.logprob <= tops[0] + 1e-5

    for i in (0, 31, 63):
        (alone,) = served.sample_alone(
            prompts[i], 1, SamplingParams(max_tokens=24, seed=i, top_logprobs=2)
        )
        (choice,) = responses[i].choices
        assert (choice.model_extra or {})["token_ids"] == list(alone.token_ids)
        logprobs = [entry.logprob for entry in (choice.logprobs.content or [])]
        assert logprobs == pytest.approx(list(alone.logprobs), abs=1e-4)


def test_clients_that_leave_mid_request_free_the_engine_and_the_server_answers_after(
    served: Served,
) -> None:
    engine = served.engine
    before = engine.tokens_run
    parts = (2, 3, 4, 6)  # seeds whose stories run to the budget rather than stop early
    max_tokens = 400

    async def leave() -> list[Any]:
        client = client_for(served)
        requests = [
            asyncio.ensure_future(
                client.chat.completions.create(
                    model="agent",
                    messages=[{"role": "user", "content": f"Tell a long story, part {i}."}],
                    max_tokens=max_tokens,
                    seed=100 + i,
                )
            )
            for i in parts
        ]
        deadline = time.monotonic() + 60
        while engine.tokens_run - before < len(parts) * 5:  # generating for them
            assert time.monotonic() < deadline
            await asyncio.sleep(0.005)
        for request in requests:
            request.cancel()
        outcomes = await asyncio.gather(*requests, return_exceptions=True)
        await client.close()
        return outcomes

    outcomes = asyncio.run(leave())
    assert all(isinstance(outcome, asyncio.CancelledError) for outcome in outcomes)

    # The engine stops generating for them: the count settles far below what they asked.
    settled = [engine.tokens_run]

    def quiet_for_a_while() -> bool:
        time.sleep(0.3)
        settled.append(engine.tokens_run)
        return settled[-1] == settled[-2]

    wait_until(quiet_for_a_while)
    assert settled[-1] - before < len(parts) * max_tokens // 2

    async def ask() -> Any:
        client = client_for(served)
        try:
            return await client.chat.completions.create(
                model="agent", messages=GOOD["messages"], max_tokens=4, logprobs=True
            )
        finally:
            await client.close()

    response = asyncio.run(ask())
    token_ids = (response.choices[0].model_extra or {})["token_ids"]
    assert 1 <= len(token_ids) <= 4
    assert len(response.choices[0].logprobs.content or []) == len(token_ids)


def test_requests_arriving_mid_generation_join_it_without_changing_any_tokens(
    served: Served,
) -> None:
    """A long generation runs; short requests arrive (one with a longer prompt than the
    batch's cache, one shorter, with n=2), join it between steps and are answered before
    it ends; every row's tokens and logprobs are those it gets alone."""
    engine = served.engine
    long_prompt = served.render([{"role": "user", "content": "Count from one to ten."}])
    wide_prompt = served.render(
        [
            {"role": "system", "content": "You are a helpful assistant. " * 12},
            {"role": "user", "content": "Is it higher or lower?"},
        ]
    )
    narrow_prompt = served.render([{"role": "user", "content": "yes"}])
    long_params = SamplingParams(max_tokens=300, temperature=0.9, seed=7, top_logprobs=2)
    short_params = SamplingParams(max_tokens=6, temperature=0.9, seed=8, top_logprobs=2)
    assert len(wide_prompt) > len(long_prompt) + 20 > len(narrow_prompt) + 20

    async def overlapping() -> tuple[list[Sample], list[Sample], list[Sample], bool]:
        join_wait_s, engine.join_wait_s = engine.join_wait_s, 0.0
        try:
            before = engine.tokens_run
            long = asyncio.ensure_future(engine.sample("agent", long_prompt, 1, long_params))
            while engine.tokens_run - before < 10:  # noqa: ASYNC110 - a counter, not an event
                await asyncio.sleep(0.002)
            wide = await engine.sample("agent", wide_prompt, 1, short_params)
            narrow = await engine.sample("agent", narrow_prompt, 2, short_params)
            running = not long.done()
            return await long, wide, narrow, running
        finally:
            engine.join_wait_s = join_wait_s

    long, wide, narrow, long_still_running = served.run(overlapping())
    assert len(long[0].token_ids) == 300  # the premise: the long row ran to its budget
    assert long_still_running

    for joined, prompt, n, params in (
        (long, long_prompt, 1, long_params),
        (wide, wide_prompt, 1, short_params),
        (narrow, narrow_prompt, 2, short_params),
    ):
        alone = served.sample_alone(prompt, n, params)
        for together, by_itself in zip(joined, alone, strict=True):
            assert together.token_ids == by_itself.token_ids
            assert together.logprobs == pytest.approx(by_itself.logprobs, abs=1e-4)
            assert [[t for t, _ in top] for top in together.top_logprobs] == [
                [t for t, _ in top] for top in by_itself.top_logprobs
            ]


# bad input --------------------------------------------------------------------------------

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=40),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)
fields = st.sampled_from(
    [
        "model",
        "messages",
        "tools",
        "n",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "seed",
        "stop",
        "logprobs",
        "top_logprobs",
        "stream",
        "frequency_penalty",
        "presence_penalty",
    ]
)
junk_messages = st.lists(
    st.dictionaries(
        st.sampled_from(["role", "content", "tool_calls", "name", "tool_call_id", "x"]),
        json_values,
        max_size=4,
    ),
    max_size=3,
)


def encoded(payload: Any) -> bytes:
    return json.dumps(payload).encode()


bodies = st.one_of(
    st.binary(max_size=300),  # malformed JSON and not UTF-8
    st.text(max_size=200).map(str.encode),
    json_values.map(encoded),  # JSON, but not a request
    st.builds(lambda field, value: encoded({**GOOD, field: value}), fields, json_values),
    st.builds(lambda value: encoded({**GOOD, "messages": value}), junk_messages),
    st.builds(lambda model: encoded({**GOOD, "model": model}), st.text(min_size=1, max_size=60)),
    st.builds(  # junk beside a valid request: ignored, and the request is answered
        lambda key, value: encoded({**GOOD, key: value}), st.text(max_size=12), json_values
    ),
    st.sampled_from(
        [
            b'{"model": "agent", "messages": [{"role": "user", "content": "x"}], '
            b'"temperature": NaN}',
            b'{"model": "agent", "messages": [{"role": "user", "content": "x"}], '
            b'"top_p": Infinity}',
            b'{"model": "agent", "messages": [{"role": "user", "content": "\\ud800"}], '
            b'"max_tokens": 2}',
            b'{"model": "\\udfff", "messages": [{"role": "user", "content": "x"}]}',
            encoded({**GOOD, "padding": "x" * MAX_BODY}),  # over the body cap
            b"[" * 100_000,
        ]
    ),
)
FUZZ = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def http(served: Served) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    with httpx.Client(base_url=served.base_url, headers=headers, timeout=120) as client:
        yield client


def assert_error_shape(response: httpx.Response) -> None:
    assert 400 <= response.status_code < 500, (response.status_code, response.text[:300])
    error = response.json()["error"]
    assert isinstance(error["message"], str) and error["message"]
    assert isinstance(error["type"], str) and error["type"]
    assert error["code"] == response.status_code


def assert_answers(http: httpx.Client) -> None:
    response = http.post("/chat/completions", content=encoded(GOOD))
    assert response.status_code == 200, response.text[:300]
    assert 1 <= len(response.json()["choices"][0]["token_ids"]) <= 2


@FUZZ
@given(body=bodies)
def test_fuzzed_requests_get_a_completion_or_an_openai_error_and_never_a_5xx(
    http: httpx.Client, body: bytes
) -> None:
    response = http.post("/chat/completions", content=body)
    if response.status_code == 200:
        choices = response.json()["choices"]
        assert choices and all(isinstance(choice["token_ids"], list) for choice in choices)
    else:
        assert_error_shape(response)
    assert_answers(http)


@pytest.mark.parametrize(
    ("method", "path", "headers", "status"),
    [
        ("POST", "/chat/completions", {"Authorization": "Bearer wrong"}, 401),
        ("POST", "/chat/completions", {"Authorization": ""}, 401),
        ("GET", "/chat/completions", {}, 405),
        ("POST", "/completions", {}, 404),
        ("GET", "/models/agent/x", {}, 404),
    ],
)
def test_wrong_routes_keys_and_headers_get_openai_errors(
    served: Served,
    http: httpx.Client,
    method: str,
    path: str,
    headers: dict[str, str],
    status: int,
) -> None:
    response = http.request(method, path, content=encoded(GOOD), headers=headers)
    assert response.status_code == status, response.text[:300]
    assert_error_shape(response)
    assert_answers(http)
