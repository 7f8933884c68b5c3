"""The Tinker OpenAI-compatible server's bookkeeping, without a socket: a tenant's aliases,
ART's `models` property (the tenant of TINKER_API_KEY), the arguments it checks, and the bound
on distinct sampling clients sampling at once (ART's `max_concurrent_sampling_clients`)."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("fastapi")

from arthex.adapters.tinker.openai_server import TinkerOpenAIServer
from arthex.adapters.tinker.tenants import ClientSlots
from arthex.core.errors import InvalidInputError

GUARD_S = 30.0  # a hang fails instead (no timing is measured)


def test_a_put_adds_or_re_points_an_alias_and_keeps_its_creation_time() -> None:
    tenant = TinkerOpenAIServer().tenant("tml-a")
    created = tenant.put("agent", "tinker://run/sampler_weights/1")
    assert tenant.put("agent", "tinker://run/sampler_weights/2") == created
    assert tenant.models == {"agent": "tinker://run/sampler_weights/2"}
    assert tenant.delete("agent") and not tenant.delete("agent")
    assert tenant.model_timestamps == {}
    for target in ("", " tinker://run/sampler_weights/1", "   "):
        with pytest.raises(InvalidInputError, match="target must be"):
            tenant.put("agent", target)
    with pytest.raises(InvalidInputError, match="non-empty name"):
        tenant.put(" ", "tinker://run/sampler_weights/1")
    assert tenant.models == {}


def test_models_are_the_aliases_of_the_tenant_whose_key_is_in_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = TinkerOpenAIServer()
    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    with pytest.raises(ValueError, match="TINKER_API_KEY is not set"):
        _ = server.models
    monkeypatch.setenv("TINKER_API_KEY", "tml-a")
    server.models = {"agent": "tinker://run/sampler_weights/1"}
    server.models["other"] = "Qwen/Qwen3-8B"
    assert server.tenant("tml-a").models == {
        "agent": "tinker://run/sampler_weights/1",
        "other": "Qwen/Qwen3-8B",
    }
    assert server.tenant("tml-b").models == {}
    monkeypatch.setenv("TINKER_API_KEY", "tml-b")
    assert server.models == {}


def test_assigning_models_over_existing_aliases_replaces_them_all_or_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TINKER_API_KEY", "tml-a")
    server = TinkerOpenAIServer()
    server.models = {"a": "tinker://run/sampler_weights/1"}
    tenant = server.tenant("tml-a")
    created = tenant.model_timestamps["a"]
    edited = server.models  # ART's pattern: read, edit, assign back
    edited["b"] = "tinker://run/sampler_weights/2"
    server.models = edited
    assert server.models == {
        "a": "tinker://run/sampler_weights/1",
        "b": "tinker://run/sampler_weights/2",
    }
    assert tenant.model_timestamps["a"] == created and set(tenant.model_timestamps) == {"a", "b"}
    fresh = {"c": "Qwen/Qwen3-8B"}
    server.models = fresh  # as ART: the dict assigned is the server's from now on
    fresh["d"] = "tinker://run/sampler_weights/3"
    assert server.models == {"c": "Qwen/Qwen3-8B", "d": "tinker://run/sampler_weights/3"}
    assert "a" not in tenant.model_timestamps
    with pytest.raises(InvalidInputError, match="got ' tinker://oops' for 'bad'"):
        server.models = {"new": "tinker://run/sampler_weights/4", "bad": " tinker://oops"}
    assert server.models == {"c": "Qwen/Qwen3-8B", "d": "tinker://run/sampler_weights/3"}


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"num_workers": 0}, "num_workers must be a positive integer"),
        ({"max_concurrent_sampling_clients": -1}, "max_concurrent_sampling_clients must be"),
        ({"port": 70000}, "port must be an integer in 0..65535"),
        ({"port": "8000"}, "port must be an integer in 0..65535 or None, got '8000'"),
        ({"num_workers": True}, "num_workers must be a positive integer or None, got True"),
        ({"default_max_tokens": 0}, "default_max_tokens must be a positive integer, got 0"),
        ({"max_body_bytes": -1}, "max_body_bytes must be a positive integer, got -1"),
        ({"timeout_s": 0}, "timeout_s must be a positive number or None"),
        ({"timeout_s": float("nan")}, "timeout_s must be a positive number"),
        ({"tokenizers": {"Qwen/Qwen3-8B": 3}}, "tokenizers must map each base model"),
        ({"host": ""}, "host must be a non-empty string"),
    ],
)
def test_bad_arguments_are_refused_before_anything_starts(
    arguments: dict[str, object], message: str
) -> None:
    with pytest.raises(InvalidInputError, match=message):
        TinkerOpenAIServer(**arguments)  # type: ignore[arg-type]


def test_at_most_the_limit_of_distinct_clients_sample_at_once_and_one_client_holds_one_slot() -> (
    None
):
    async def scenario() -> None:
        slots = ClientSlots(1)
        entered: asyncio.Queue[str] = asyncio.Queue()
        release = asyncio.Event()

        async def sample(target: str) -> None:
            async with slots.hold(target):
                entered.put_nowait(target)
                await release.wait()

        first = asyncio.create_task(sample("a"))
        assert await asyncio.wait_for(entered.get(), GUARD_S) == "a"
        other = asyncio.create_task(sample("b"))  # another client: waits for the slot
        same = asyncio.create_task(sample("a"))  # the same client: shares its slot
        assert await asyncio.wait_for(entered.get(), GUARD_S) == "a"  # not behind "b"
        for _ in range(20):  # every task had its turns: "b" is still waiting
            await asyncio.sleep(0)
        assert entered.empty() and not other.done()
        release.set()
        await asyncio.gather(first, other, same)
        assert entered.get_nowait() == "b"

    asyncio.run(scenario())
