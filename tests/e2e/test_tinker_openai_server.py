"""ART's standalone Tinker server, arthex's (`arthex.art.tinker.OpenAICompatibleTinkerServer`),
on loopback in front of the tinker emulator on the tiny model, driven over real HTTP by the
client `arthex.art.tinker.client.TinkerAsyncOpenAI`.

Two sampler paths are saved with the Tinker SDK itself: `before` (a fresh LoRA, so the base
model's weights) and `after` (one cross-entropy step later). The oracles are elsewhere: the
base model's logprobs from a plain torch forward of the tiny model, and a sampler path's
from the SDK's own `compute_logprobs` on the emulator (not through the server).

Two faults the emulator cannot produce, a 403 for one path and a slow session start, are made
by `GatedClients`: the SDK's own clients on the emulator, with those two changes.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

import httpx
import pytest

pytest.importorskip("tinker")
pytest.importorskip("torch")

import openai

from arthex.art.tinker import OpenAICompatibleTinkerServer
from arthex.art.tinker.client import TinkerAsyncOpenAI
from arthex.core.errors import BackendError, InvalidInputError
from arthex.emulators.tinker import TinkerEmulator
from tests._tinker import running_emulator, sampler_paths

pytestmark = [pytest.mark.e2e]

ALICE = "tml-alice"
BOB = "tml-bob"
TIMEOUT_S = 120.0
MESSAGES: list[Any] = [{"role": "user", "content": "Hello! How can I help you today?"}]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    from arthex.testing.tiny_model import tiny_model

    return tiny_model(tmp_path_factory.getbasetemp() / "tiny-model")


@pytest.fixture(scope="module")
def emulator(tiny: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TinkerEmulator]:
    """Any key of the SDK's shape is let in (alice's and bob's)."""
    yield from running_emulator(tiny, None, tmp_path_factory)


@pytest.fixture(scope="module")
def paths(emulator: TinkerEmulator, tiny: str) -> dict[str, str]:
    return sampler_paths(emulator.base_url, ALICE, tiny, TIMEOUT_S)


def sdk_logprobs(emulator: TinkerEmulator, path: str, tokens: list[int]) -> list[float | None]:
    """The emulator's scores of `tokens` under `path`, through the SDK, not the server."""
    import tinker
    from tinker import types

    service = tinker.ServiceClient(base_url=emulator.base_url, api_key=ALICE)
    try:
        sampler = service.create_sampling_client(model_path=path).result(TIMEOUT_S)
        return list(sampler.compute_logprobs(types.ModelInput.from_ints(tokens)).result(TIMEOUT_S))
    finally:
        service.close("success").result(TIMEOUT_S)


def torch_logprobs(tiny: str, tokens: list[int]) -> list[float]:
    """log p(token i | tokens before it) for i >= 1, by a plain forward of the tiny model."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny, dtype=torch.float32)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([tokens])).logits[0].float()
    table = torch.log_softmax(logits, dim=-1)
    return [float(table[i - 1, tokens[i]]) for i in range(1, len(tokens))]


async def serving(emulator: TinkerEmulator, **kwargs: Any) -> tuple[Any, str]:
    server = OpenAICompatibleTinkerServer(
        host="127.0.0.1", base_url=emulator.base_url, timeout_s=TIMEOUT_S, **kwargs
    )
    host, port = await server.start()
    return server, f"http://{host}:{port}/v1"


def client(url: str, key: str) -> TinkerAsyncOpenAI:
    return TinkerAsyncOpenAI(base_url=url, api_key=key, max_retries=0, timeout=TIMEOUT_S)


def sampled(choice: Any) -> tuple[list[int], list[int], list[float | None]]:
    extra = choice.model_extra
    logprobs = [entry.logprob for entry in choice.logprobs.content]
    return list(extra["prompt_token_ids"]), list(extra["token_ids"]), logprobs


def close_to(
    actual: Sequence[float | None], expected: Sequence[float | None], tolerance: float = 2e-4
) -> bool:
    assert len(actual) == len(expected), (len(actual), len(expected))
    return all(
        a is not None and e is not None and abs(a - e) <= tolerance
        for a, e in zip(actual, expected, strict=True)
    )


def test_an_alias_serves_its_sampler_path_and_put_re_points_it(
    emulator: TinkerEmulator, paths: dict[str, str]
) -> None:
    async def scenario() -> None:
        server, url = await serving(emulator)
        try:
            alice = client(url, ALICE)
            put = await alice.models.put("agent", target=paths["before"])
            assert (put.id, put.owned_by) == ("agent", "tinker") and put.created > 0
            listed = await alice.models.list()
            assert [m.id for m in listed.data] == ["agent"]
            assert (await alice.models.retrieve("agent")).created == put.created

            first = await alice.chat.completions.create(
                model="agent", messages=MESSAGES, max_tokens=8, temperature=0, logprobs=True
            )
            assert first.model == "agent" and first.usage is not None
            prompt, tokens, logprobs = sampled(first.choices[0])
            assert first.usage.completion_tokens == len(tokens) >= 1
            content = first.choices[0].logprobs.content if first.choices[0].logprobs else None
            assert [e.token for e in content or []] == [f"token_id:{t}" for t in tokens]
            before = await asyncio.to_thread(
                sdk_logprobs, emulator, paths["before"], prompt + tokens
            )
            assert close_to(logprobs, before[len(prompt):])  # fmt: skip

            again = await alice.models.put("agent", target=paths["after"])
            assert again.created == put.created  # re-pointed, not re-made
            second = await alice.chat.completions.create(
                model="agent", messages=MESSAGES, max_tokens=8, temperature=0
            )
            prompt2, tokens2, logprobs2 = sampled(second.choices[0])
            after = await asyncio.to_thread(
                sdk_logprobs, emulator, paths["after"], prompt2 + tokens2
            )
            assert close_to(logprobs2, after[len(prompt2):])  # fmt: skip
            old = await asyncio.to_thread(
                sdk_logprobs, emulator, paths["before"], prompt2 + tokens2
            )
            assert not close_to(logprobs2, old[len(prompt2):], 1e-3)  # fmt: skip

            raw = await alice.models.with_raw_response.put("agent", target=paths["before"])
            assert raw.status_code == 200 and raw.parse().id == "agent"
            streamed = alice.models.with_streaming_response
            async with streamed.put("agent", target=paths["after"]) as answer:
                assert answer.http_request.method == "PUT" and answer.status_code == 200
                assert (await answer.parse()).id == "agent"
            assert server.tenant(ALICE).models == {"agent": paths["after"]}
            await alice.models.put("agent", target=paths["before"])
            assert server.tenant(ALICE).models == {"agent": paths["before"]}

            deleted = await alice.models.delete("agent")
            assert deleted.deleted and (await alice.models.list()).data == []
            await alice.close()
        finally:
            await server.stop()

    asyncio.run(scenario())


def test_with_logprobs_scores_existing_choices_under_other_models(
    emulator: TinkerEmulator, paths: dict[str, str], tiny: str
) -> None:
    async def scenario() -> None:
        server, url = await serving(emulator)
        try:
            alice = client(url, ALICE)
            await alice.models.put("trained", target=paths["after"])
            completion = await alice.chat.completions.create(
                model="trained", messages=MESSAGES, max_tokens=6, temperature=1.0, seed=3
            )
            choice = completion.choices[0]
            prompt, tokens, logprobs = sampled(choice)
            conversation: list[Any] = [*MESSAGES, choice]
            scored = await alice.messages_and_choices.with_logprobs(
                conversation,
                models=["trained", tiny],
                model_aliases={tiny: "base"},
                tools=None,
            )
            assert len(scored.messages_and_choices) == 2
            assert scored.messages_and_choices[0] == MESSAGES[0]
            back = scored.messages_and_choices[1]
            assert not isinstance(back, dict) and back.logprobs is not None
            entries = back.logprobs.content or []
            assert len(entries) == len(tokens)
            extra = [entry.model_extra["extra_logprobs"] for entry in entries]  # type: ignore[index]
            # the model that sampled the tokens scores them as it sampled them
            assert close_to([e["trained"] for e in extra], logprobs)
            # the base model, by name, scores them as a plain torch forward does
            oracle = await asyncio.to_thread(torch_logprobs, tiny, prompt + tokens)
            assert close_to([e["base"] for e in extra], oracle[len(prompt) - 1 :])
            assert not close_to([e["base"] for e in extra], logprobs, 1e-3)
            usage = len(prompt) + len(tokens)
            assert [(u.prompt_tokens, u.completion_tokens) for u in scored.usages] == [
                (usage, 1),
                (usage, 1),
            ]
            streamed = alice.messages_and_choices.with_streaming_response
            async with streamed.with_logprobs(conversation, models=[tiny], tools=None) as answer:
                assert answer.http_request.url.path == "/v1/messages_and_choices/with_logprobs"
                again = await answer.parse()
            entries = again.messages_and_choices[1].logprobs.content or []  # type: ignore[union-attr]
            assert close_to([e.model_extra["extra_logprobs"][tiny] for e in entries],  # type: ignore[index]
                            oracle[len(prompt) - 1 :])  # fmt: skip
            # a Choice without its sampler's token ids cannot be scored, and says why
            bare = choice.model_copy()
            bare.__pydantic_extra__ = {}
            with pytest.raises(openai.BadRequestError, match="lacks prompt_token_ids"):
                await alice.messages_and_choices.with_logprobs(
                    [*MESSAGES, bare], models=["trained"], tools=None
                )
            await alice.close()
        finally:
            await server.stop()

    asyncio.run(scenario())


def test_two_api_keys_are_two_tenants_that_never_see_each_others_aliases(
    emulator: TinkerEmulator, paths: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TINKER_API_KEY", ALICE)

    async def scenario() -> None:
        server, url = await serving(emulator)
        try:
            server.models = {"agent": paths["before"]}  # ART's property: TINKER_API_KEY's tenant
            alice, bob = client(url, ALICE), client(url, BOB)
            assert [m.id for m in (await alice.models.list()).data] == ["agent"]
            assert (await bob.models.list()).data == []
            with pytest.raises(openai.NotFoundError, match="not one of your aliases"):
                await bob.models.retrieve("agent")
            with pytest.raises(openai.NotFoundError, match="model not found: 'agent'"):
                await bob.chat.completions.create(model="agent", messages=MESSAGES, max_tokens=2)
            await bob.models.put("agent", target=paths["after"])
            assert server.models == {"agent": paths["before"]}
            assert server.tenant(BOB).models == {"agent": paths["after"]}
            a = await alice.chat.completions.create(
                model="agent", messages=MESSAGES, max_tokens=4, temperature=0
            )
            b = await bob.chat.completions.create(
                model="agent", messages=MESSAGES, max_tokens=4, temperature=0
            )
            pa, ta, la = sampled(a.choices[0])
            pb, tb, lb = sampled(b.choices[0])
            expected_a = await asyncio.to_thread(sdk_logprobs, emulator, paths["before"], pa + ta)
            expected_b = await asyncio.to_thread(sdk_logprobs, emulator, paths["after"], pb + tb)
            assert close_to(la, expected_a[len(pa) :])
            assert close_to(lb, expected_b[len(pb) :])
            await alice.close()
            await bob.close()
        finally:
            await server.stop()

    asyncio.run(scenario())


def test_bad_keys_and_unknown_models_are_clear_http_errors(
    emulator: TinkerEmulator, tiny: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    strict = running_emulator(tiny, ALICE, tmp_path_factory)  # lets in alice's key only
    only_alice = next(strict)

    async def scenario() -> None:
        server, url = await serving(emulator)
        guarded, guarded_url = await serving(only_alice)
        try:
            async with httpx.AsyncClient(base_url=url) as http:
                answer = await http.get("/models")
                assert answer.status_code == 401
                assert "Authorization: Bearer" in answer.json()["error"]["message"]
            async with client(url, "sk-openai-key") as stranger:
                with pytest.raises(openai.AuthenticationError, match="not a Tinker API key"):
                    await stranger.models.list()
            async with client(guarded_url, "tml-mallory") as mallory:
                with pytest.raises(openai.AuthenticationError, match="Tinker refused this API"):
                    await mallory.chat.completions.create(
                        model=tiny, messages=MESSAGES, max_tokens=2
                    )
            async with httpx.AsyncClient(base_url=guarded_url.removesuffix("/v1")) as http:
                metrics = (await http.get("/metrics")).text  # a refused key leaves no tenant
            assert "arthex_tinker_tenants 0\n" in metrics
            assert 'route="/v1/chat/completions",status="401"} 1' in metrics
            alice = client(url, ALICE)
            with pytest.raises(openai.NotFoundError, match="model not found: 'no-such-model'"):
                await alice.chat.completions.create(
                    model="no-such-model", messages=MESSAGES, max_tokens=2
                )
            with pytest.raises(openai.NotFoundError, match="model not found: 'no-such-model'"):
                await alice.messages_and_choices.with_logprobs(
                    MESSAGES, models=["no-such-model"], tools=None
                )
            gone = "tinker://no-such-run/sampler_weights/x"
            with pytest.raises(openai.NotFoundError, match="model not found"):
                await alice.chat.completions.create(model=gone, messages=MESSAGES, max_tokens=2)
            with pytest.raises(openai.NotFoundError, match="not one of your aliases"):
                await alice.models.delete("never-put")
            with pytest.raises(openai.BadRequestError, match="target"):
                await alice.models.put("agent", target="")
            with pytest.raises(openai.BadRequestError, match="max_tokens"):
                await alice.chat.completions.create(model=tiny, messages=MESSAGES, max_tokens=0)
            await alice.close()
        finally:
            await server.stop()
            await guarded.stop()

    try:
        asyncio.run(scenario())
    finally:
        next(strict, None)


def test_stop_releases_the_port_and_a_new_start_serves_the_same_aliases(
    emulator: TinkerEmulator, paths: dict[str, str], tiny: str
) -> None:
    async def scenario() -> None:
        server, url = await serving(emulator)
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        async with httpx.AsyncClient(base_url=url.removesuffix("/v1")) as http:
            assert (await http.get("/health")).json() == {"status": "ok"}
        alice = client(url, ALICE)
        await alice.models.put("agent", target=paths["before"])
        await alice.chat.completions.create(model="agent", messages=MESSAGES, max_tokens=2)
        async with httpx.AsyncClient(base_url=url.removesuffix("/v1")) as http:
            metrics = (await http.get("/metrics")).text
        assert 'route="/v1/chat/completions",status="200"} 1' in metrics
        with pytest.raises(Exception, match="already started"):
            await server.start()
        await server.stop()
        with socket.socket() as sock:  # no one listens there any more: it can be had again
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", port))
            sock.listen()
        server.port = port
        host, again = await server.start()
        try:
            assert (host, again) == ("127.0.0.1", port)
            answer = await alice.chat.completions.create(
                model="agent", messages=MESSAGES, max_tokens=2
            )
            assert answer.model == "agent"
        finally:
            await alice.close()
            await server.stop()

    asyncio.run(scenario())


def test_an_idle_connection_stays_open_past_the_openai_clients_own_keep_alive(
    emulator: TinkerEmulator,
) -> None:
    from openai._constants import DEFAULT_CONNECTION_LIMITS

    from tests._serverless import statuses_around_an_idle_wait

    expiry = DEFAULT_CONNECTION_LIMITS.keepalive_expiry
    assert expiry is not None

    async def scenario() -> list[bytes]:
        server, url = await serving(emulator)
        try:
            return await statuses_around_an_idle_wait(
                url.removesuffix("/v1"), "/health", expiry + 1.0
            )
        finally:
            await server.stop()

    assert asyncio.run(scenario()) == [b"HTTP/1.1 200 OK"] * 2


def test_arts_module_paths_are_arthexs_server_and_client() -> None:
    from arthex.adapters.tinker.openai_client import TinkerAsyncOpenAI as Client
    from arthex.adapters.tinker.openai_server import TinkerOpenAIServer
    from arthex.art.tinker.server import OpenAICompatibleTinkerServer as Server
    from arthex.art.tinker.server import get_free_port

    assert Server is TinkerOpenAIServer and TinkerAsyncOpenAI is Client
    port = get_free_port("127.0.0.1")
    assert 8000 <= port <= 65535
    with socket.socket() as taken:  # the port it names can be had, and once had is skipped
        taken.bind(("127.0.0.1", port))
        taken.listen()
        assert get_free_port("127.0.0.1") != port


TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look a word up",
            "parameters": {"type": "object", "properties": {"word": {"type": "string"}}},
        },
    }
]
WITH_A_TOOL_CALL: list[Any] = [
    *MESSAGES,
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "lookup", "arguments": '{"word": "fox"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "a small wild canine"},
]


def test_tools_and_tool_calls_are_rendered_by_the_base_models_chat_template(
    emulator: TinkerEmulator, tiny: str
) -> None:
    from transformers import AutoTokenizer

    template = AutoTokenizer.from_pretrained(tiny)
    expected = template.apply_chat_template(
        WITH_A_TOOL_CALL, tools=TOOLS, add_generation_prompt=True, tokenize=True, return_dict=False
    )

    async def scenario() -> None:
        server, url = await serving(emulator)
        try:
            alice = client(url, ALICE)
            answer = await alice.chat.completions.create(
                model=tiny, messages=WITH_A_TOOL_CALL, tools=TOOLS, max_tokens=4, temperature=0
            )
            prompt, _tokens, logprobs = sampled(answer.choices[0])
            assert prompt == list(expected)
            bare = await alice.chat.completions.create(
                model=tiny, messages=WITH_A_TOOL_CALL, max_tokens=1, temperature=0
            )
            assert sampled(bare.choices[0])[0] != prompt  # the tools are in the prompt
            scored = await alice.messages_and_choices.with_logprobs(
                [*WITH_A_TOOL_CALL, answer.choices[0]], models=[tiny], tools=TOOLS
            )
            back = scored.messages_and_choices[-1]
            assert not isinstance(back, dict) and back.logprobs is not None
            values = [e.model_extra["extra_logprobs"][tiny] for e in back.logprobs.content or []]  # type: ignore[index]
            assert close_to(values, logprobs)
            assert scored.messages_and_choices[:-1] == WITH_A_TOOL_CALL
            await alice.close()
        finally:
            await server.stop()

    asyncio.run(scenario())


FORBIDDEN = "tinker://someone-elses-run/sampler_weights/x"
GUARD_S = 60.0  # a hang fails instead (no timing is measured)


class Forbidden(Exception):
    """What the SDK raises for Tinker's 403 (the emulator lets every key read every path, so
    this one answer is made here)."""

    status_code = 403


class GatedClients:
    """The SDK's own clients on the emulator, except that making a ServiceClient waits for
    `made` (a slow session start), opening a sampling client for anything but FORBIDDEN waits
    for `opening`, and FORBIDDEN is refused with a 403; `finished` counts sessions closed."""

    slow: ClassVar[str | None] = None  # the one path whose opening waits (None: every one)
    scored: ClassVar[list[str]] = []
    started: ClassVar[list[str]] = []
    made: ClassVar[threading.Event] = threading.Event()
    opening: ClassVar[threading.Event] = threading.Event()
    waiting: ClassVar[threading.Event] = threading.Event()
    finished: ClassVar[list[str]] = []

    def __init__(self, base_url: str | None = None, api_key: str | None = None) -> None:
        from arthex.adapters.tinker.clients import SdkClients

        self._real = SdkClients(base_url, api_key)

    @classmethod
    def reset(cls) -> None:
        cls.made, cls.opening, cls.waiting = threading.Event(), threading.Event(), threading.Event()
        cls.finished, cls.scored, cls.started, cls.slow = [], [], [], None

    def service(self) -> Any:
        self.started.append("session")
        assert self.made.wait(GUARD_S)
        real: Any = self._real.service()
        create, close = real.create_sampling_client, real.close

        def create_sampling_client(model_path: str | None = None, **kwargs: Any) -> Any:
            if model_path == FORBIDDEN:
                raise Forbidden("permission denied: this key may not read that run")
            if self.slow in (None, model_path):
                self.waiting.set()
                assert self.opening.wait(GUARD_S)
            made = create(model_path=model_path, **kwargs)
            scored = self.scored

            async def counting() -> Any:
                sampler = await made
                score = sampler.compute_logprobs

                def counted(prompt: Any) -> Any:
                    scored.append(str(model_path))
                    return score(prompt)

                sampler.compute_logprobs = counted
                return sampler

            return counting()

        def finish(status: Any) -> Any:
            self.finished.append(status)
            return close(status)

        real.create_sampling_client = create_sampling_client
        real.close = finish
        return real


@pytest.fixture
def gated(monkeypatch: pytest.MonkeyPatch) -> type[GatedClients]:
    from arthex.adapters.tinker import tenants

    GatedClients.reset()
    monkeypatch.setattr(tenants, "SdkClients", GatedClients)
    return GatedClients


def test_a_403_for_one_path_answers_that_request_and_leaves_the_tenants_others_alone(
    emulator: TinkerEmulator, paths: dict[str, str], gated: type[GatedClients]
) -> None:
    gated.made.set()
    gated.slow = paths["before"]

    async def scenario() -> None:
        server, url = await serving(emulator)
        try:
            alice = client(url, ALICE)
            slow = asyncio.create_task(
                alice.chat.completions.create(
                    model=paths["before"], messages=MESSAGES, max_tokens=2, temperature=0
                )
            )
            assert await asyncio.to_thread(gated.waiting.wait, GUARD_S)  # opening, in flight
            with pytest.raises(openai.PermissionDeniedError) as refused:
                await alice.chat.completions.create(model=FORBIDDEN, messages=MESSAGES)
            assert f"Tinker refused access to {FORBIDDEN!r}" in str(refused.value)
            assert "API key:" in str(refused.value) and "refused this API key" not in str(
                refused.value
            )
            gated.opening.set()
            answer = await asyncio.wait_for(slow, GUARD_S)
            assert answer.model == paths["before"] and len(answer.choices) == 1
            assert gated.finished == []  # the tenant's session lives on
            again = await alice.chat.completions.create(
                model=paths["before"], messages=MESSAGES, max_tokens=2
            )
            assert again.choices[0].finish_reason in ("stop", "length")
            await alice.close()
        finally:
            await server.stop()
        assert gated.finished == ["success"]

    asyncio.run(scenario())


def test_closing_a_tenant_whose_session_is_still_starting_finishes_that_session(
    emulator: TinkerEmulator, paths: dict[str, str], gated: type[GatedClients]
) -> None:
    gated.opening.set()

    async def scenario() -> None:
        server = OpenAICompatibleTinkerServer(base_url=emulator.base_url, timeout_s=TIMEOUT_S)
        tenant = server.tenant(ALICE)
        opening = asyncio.create_task(tenant.open(paths["before"]))
        for _ in range(50):  # the session start is on its thread, waiting for `made`
            await asyncio.sleep(0)
        closing = asyncio.create_task(tenant.close())
        for _ in range(50):
            await asyncio.sleep(0)
        gated.made.set()  # the ServiceClient is made only now, while the tenant closes
        await asyncio.wait_for(closing, GUARD_S)
        assert gated.finished == ["success"]  # made after close() began, and finished
        with pytest.raises(BackendError, match="closed while"):
            await asyncio.wait_for(opening, GUARD_S)

    asyncio.run(scenario())


def test_cancelling_stop_still_stops_the_server_and_the_cancellation_goes_on() -> None:
    async def scenario() -> None:
        server = OpenAICompatibleTinkerServer(host="127.0.0.1")
        _, port = await server.start()
        stopping = asyncio.create_task(server.stop())
        await asyncio.sleep(0)  # stop() now waits for the server's task
        stopping.cancel()
        with pytest.raises(asyncio.CancelledError):
            await stopping
        with socket.socket() as sock:  # the port is free again
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", port))
        server.port = port
        host, again = await server.start()
        try:
            async with httpx.AsyncClient(base_url=f"http://{host}:{again}") as http:
                assert (await http.get("/health")).json() == {"status": "ok"}
        finally:
            await server.stop()

    asyncio.run(scenario())


def test_a_chunked_body_past_the_cap_is_refused_while_it_streams() -> None:
    async def scenario() -> None:
        server = OpenAICompatibleTinkerServer(host="127.0.0.1", max_body_bytes=1000)
        host, port = await server.start()
        reader, writer = await asyncio.open_connection(host, port)
        try:
            writer.write(
                b"PUT /v1/models/agent HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tml-a\r\n"
                b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
            )
            chunk = b'{"target": "' + b"x" * 2000
            writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))  # no last chunk: still sending
            await writer.drain()
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), GUARD_S)
            assert head.split()[1] == b"413", head
            length = next(
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            body = await asyncio.wait_for(reader.readexactly(length), GUARD_S)
            assert b"larger than 1000 bytes" in body
        finally:
            writer.close()
            await writer.wait_closed()
            await server.stop()
        assert server.tenant("tml-a").models == {}

    asyncio.run(scenario())


def test_keys_that_only_read_or_fail_to_put_leave_no_tenant_behind() -> None:
    async def scenario() -> None:
        server = OpenAICompatibleTinkerServer(host="127.0.0.1")
        host, port = await server.start()
        try:
            async with httpx.AsyncClient(base_url=f"http://{host}:{port}") as http:
                for i in range(20):
                    key = {"Authorization": f"Bearer tml-stranger-{i}"}
                    listed = await http.get("/v1/models", headers=key)
                    assert listed.status_code == 200 and listed.json()["data"] == []
                    assert (await http.get("/v1/models/a", headers=key)).status_code == 404
                    assert (await http.delete("/v1/models/a", headers=key)).status_code == 404
                    bad = await http.put("/v1/models/a", headers=key, json={"target": ""})
                    assert bad.status_code == 400
                assert "arthex_tinker_tenants 0\n" in (await http.get("/metrics")).text
                alice = {"Authorization": f"Bearer {ALICE}"}
                put = await http.put("/v1/models/a", headers=alice, json={"target": "Qwen/Q"})
                assert put.status_code == 200
                assert "arthex_tinker_tenants 1\n" in (await http.get("/metrics")).text
                assert (await http.delete("/v1/models/a", headers=alice)).status_code == 200
                assert "arthex_tinker_tenants 0\n" in (await http.get("/metrics")).text
        finally:
            await server.stop()

    asyncio.run(scenario())


def test_an_alias_with_characters_that_mean_something_in_a_url_is_put_as_it_is() -> None:
    names = ["run?v=2", "a#b", "50%", "a/b", "x y"]

    async def scenario() -> None:
        server = OpenAICompatibleTinkerServer(host="127.0.0.1")
        host, port = await server.start()
        try:
            async with client(f"http://{host}:{port}/v1", ALICE) as alice:
                for i, name in enumerate(names):
                    put = await alice.models.put(name, target=f"tinker://r/sampler_weights/{i}")
                    assert put.id == name
                    assert (await alice.models.retrieve(name)).id == name
                assert [m.id for m in (await alice.models.list()).data] == names
        finally:
            await server.stop()
        assert server.tenant(ALICE).models == {
            name: f"tinker://r/sampler_weights/{i}" for i, name in enumerate(names)
        }

    asyncio.run(scenario())


def test_chat_template_kwargs_reach_the_template_and_top_k_is_refused(
    emulator: TinkerEmulator, tiny: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    from transformers import AutoTokenizer

    from arthex.testing.tiny_model import CHAT_TEMPLATE

    template = AutoTokenizer.from_pretrained(tiny)
    generation = "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    assert generation in CHAT_TEMPLATE
    template.chat_template = CHAT_TEMPLATE.replace(
        generation,
        "{% if add_generation_prompt %}<|im_start|>assistant\n"
        "{% if enable_thinking is false %}<think>\n\n</think>\n{% endif %}{% endif %}",
    )
    folder = str(tmp_path_factory.mktemp("thinking-template"))
    template.save_pretrained(folder)
    expected = template.apply_chat_template(
        MESSAGES, add_generation_prompt=True, tokenize=True, return_dict=False,
        enable_thinking=False,
    )  # fmt: skip
    plain = template.apply_chat_template(
        MESSAGES, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    assert list(expected) != list(plain)

    async def scenario() -> None:
        server, url = await serving(emulator, tokenizers={tiny: folder})
        try:
            alice = client(url, ALICE)
            answer = await alice.chat.completions.create(
                model=tiny, messages=MESSAGES, max_tokens=1,
                extra_body={"chat_template_kwargs": {"enable_thinking": False}},
            )  # fmt: skip
            assert sampled(answer.choices[0])[0] == list(expected)
            default = await alice.chat.completions.create(
                model=tiny, messages=MESSAGES, max_tokens=1
            )
            assert sampled(default.choices[0])[0] == list(plain)
            with pytest.raises(openai.BadRequestError, match="top_k is not supported"):
                await alice.chat.completions.create(
                    model=tiny, messages=MESSAGES, max_tokens=1, extra_body={"top_k": 5}
                )
            with pytest.raises(openai.BadRequestError, match="may not set tokenize"):
                await alice.chat.completions.create(
                    model=tiny, messages=MESSAGES, max_tokens=1,
                    extra_body={"chat_template_kwargs": {"tokenize": False}},
                )  # fmt: skip
            await alice.close()
        finally:
            await server.stop()

    asyncio.run(scenario())


def test_arts_tenant_is_made_with_arts_arguments_and_samples_with_its_key(
    emulator: TinkerEmulator, paths: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from arthex.art.tinker.server import OpenAICompatibleTinkerServerTenant

    monkeypatch.setenv("TINKER_BASE_URL", emulator.base_url)  # as ART's: the SDK's default

    async def scenario() -> None:
        tenant = OpenAICompatibleTinkerServerTenant(ALICE, 4)
        assert (tenant.models, tenant.model_timestamps) == ({}, {})
        tenant.models["agent"] = paths["before"]
        try:
            engine, target = await tenant.open("agent")
            assert target == paths["before"] and engine.is_served(target)
        finally:
            await tenant.close()

    asyncio.run(scenario())
    with pytest.raises(InvalidInputError, match="max_concurrent_sampling_clients must be"):
        OpenAICompatibleTinkerServerTenant(ALICE, 0)


def test_when_one_model_cannot_score_the_others_stop_calling_tinker(
    emulator: TinkerEmulator, paths: dict[str, str], tiny: str, gated: type[GatedClients]
) -> None:
    gated.made.set()
    gated.slow = paths["after"]

    async def scenario() -> None:
        server, url = await serving(emulator)
        try:
            alice = client(url, ALICE)
            answer = await alice.chat.completions.create(
                model=tiny, messages=MESSAGES, max_tokens=3
            )
            conversation: list[Any] = [*MESSAGES, answer.choices[0]]
            with pytest.raises(openai.PermissionDeniedError, match="refused access"):
                await alice.messages_and_choices.with_logprobs(
                    conversation, models=[paths["after"], FORBIDDEN], tools=None
                )
            gated.opening.set()  # paths["after"] opens only now, after the answer
            await alice.chat.completions.create(  # waits for that same opening
                model=paths["after"], messages=MESSAGES, max_tokens=2
            )
            assert gated.scored == []  # nothing scored for an answer already given
            scored = await alice.messages_and_choices.with_logprobs(
                conversation, models=[paths["after"]], tools=None
            )
            assert gated.scored == [paths["after"]] and len(scored.usages) == 1
            await alice.close()
        finally:
            await server.stop()

    asyncio.run(scenario())


def test_a_choice_too_short_to_score_is_refused_before_any_tinker_call(
    emulator: TinkerEmulator, tiny: str, gated: type[GatedClients]
) -> None:
    gated.made.set()
    gated.opening.set()

    async def scenario() -> None:
        server, url = await serving(emulator)
        try:
            alice = client(url, ALICE)
            answer = await alice.chat.completions.create(
                model=tiny, messages=MESSAGES, max_tokens=1
            )
            choice = answer.choices[0].model_copy(deep=True)
            extra = choice.model_extra
            assert extra is not None and choice.logprobs is not None
            extra["prompt_token_ids"], extra["token_ids"] = [], extra["token_ids"][:1]
            choice.logprobs.content = (choice.logprobs.content or [])[:1]
            await server.stop()  # a fresh start: no session opened yet
            gated.started.clear()
            host, port = await server.start()
            fresh = client(f"http://{host}:{port}/v1", ALICE)
            with pytest.raises(openai.BadRequestError, match="fewer than two"):
                await fresh.messages_and_choices.with_logprobs([choice], models=[tiny], tools=None)
            assert gated.started == []
            await alice.close()
            await fresh.close()
        finally:
            await server.stop()

    asyncio.run(scenario())
