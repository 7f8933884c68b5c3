"""ART 0.5.23's own Tinker server client, `art.tinker.client.TinkerAsyncOpenAI`, talks to
arthex's server (`arthex.art.tinker.OpenAICompatibleTinkerServer`) on loopback, in front of the
tinker emulator on the tiny model; the same script (art/tinker_server_script.py) run with
arthex's client gets the same answers.

The script puts an alias on a sampler path, completes greedily through it, re-points it,
scores the first choice under the alias and the base model, deletes the alias and is refused
three times. The oracles: a greedy completion is the same whoever asks; the alias scores the
tokens it sampled with the logprobs it sampled them with; the base model's scores are a plain
torch forward of the tiny model; the second completion, through the re-pointed alias, differs.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("tinker")
pytest.importorskip("torch")

from arthex.adapters.tinker.openai_server import TinkerOpenAIServer
from arthex.emulators.tinker import TinkerEmulator
from tests._tinker import running_emulator, sampler_paths

from .art_env import art_outcome, arthex_outcome

pytestmark = [pytest.mark.e2e]

SCRIPT = "tinker_server_script"
KEY = "tml-interop"
TIMEOUT_S = 120.0


@pytest.fixture(scope="module")
def emulator(tiny: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TinkerEmulator]:
    yield from running_emulator(tiny, None, tmp_path_factory)


@pytest.fixture(scope="module")
def server_url(emulator: TinkerEmulator) -> Iterator[str]:
    """arthex's server on an event loop of its own thread, for the length of the module."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="tinker-openai-server", daemon=True)
    thread.start()
    server = TinkerOpenAIServer(host="127.0.0.1", base_url=emulator.base_url, timeout_s=TIMEOUT_S)
    host, port = asyncio.run_coroutine_threadsafe(server.start(), loop).result(TIMEOUT_S)
    try:
        yield f"http://{host}:{port}/v1"
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(TIMEOUT_S)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(TIMEOUT_S)
        loop.close()


def run_arts(cases: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = art_outcome(SCRIPT, cases, timeout_s=600)
    return result


def run_arthexs(cases: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = arthex_outcome(SCRIPT, cases)
    return result


def torch_logprobs(tiny: str, tokens: list[int]) -> list[float]:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny, dtype=torch.float32)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([tokens])).logits[0].float()
    table = torch.log_softmax(logits, dim=-1)
    return [float(table[i - 1, tokens[i]]) for i in range(1, len(tokens))]


def close(actual: list[float], expected: list[float], tolerance: float = 2e-4) -> bool:
    return len(actual) == len(expected) and all(
        math.isfinite(a) and abs(a - e) <= tolerance for a, e in zip(actual, expected, strict=True)
    )


def test_arts_own_client_is_served_by_arthexs_tinker_server(
    emulator: TinkerEmulator, server_url: str, tiny: str
) -> None:
    paths = sampler_paths(emulator.base_url, KEY, tiny, TIMEOUT_S)
    cases = {"base_url": server_url, "api_key": KEY, "base_model": tiny, **paths}
    arts = run_arts(cases)
    ours = run_arthexs({**cases, "api_key": "tml-interop-arthex"})  # a tenant of its own

    assert arts["client"] == ["TinkerAsyncOpenAI", "TinkerAsyncModels"]
    assert arts["put"] == ["agent", "model", "tinker", True]
    assert arts["listed"] == ["agent"] and arts["retrieved"] == "agent"
    assert arts["first_model"] == "agent" and arts["raw"] == [200, "agent"]
    first, second = arts["first"], arts["second"]
    assert first["tokens"] == [f"token_id:{t}" for t in first["token_ids"]]
    assert first["logprobs"] != second["logprobs"]  # the re-pointed alias samples elsewhere
    assert arts["scored_types"] == ["dict", "Choice"]
    extra = arts["extra_logprobs"]
    assert close([e["agent"] for e in extra], first["logprobs"])
    prompt, tokens = first["prompt_token_ids"], first["token_ids"]
    oracle = torch_logprobs(tiny, prompt + tokens)[len(prompt) - 1 :]
    assert close([e["base"] for e in extra], oracle)  # `before` is the base model's weights
    assert arts["usages"] == [[len(prompt) + len(tokens), 1]] * 2
    assert arts["deleted"] == ["agent", True]
    assert arts["after_delete"] == {"error": "NotFoundError"}
    assert arts["unknown"] == {"error": "NotFoundError"}
    assert arts["stranger"] == {"error": "AuthenticationError"}

    # arthex's client, the same script: the same answers (greedy sampling is the same)
    assert {k: v for k, v in ours.items() if k not in ("first", "second", "extra_logprobs")} == {
        k: v for k, v in arts.items() if k not in ("first", "second", "extra_logprobs")
    }
    for key in ("first", "second"):
        assert ours[key]["token_ids"] == arts[key]["token_ids"]
        assert close(ours[key]["logprobs"], arts[key]["logprobs"], 1e-5)
    assert close([e["base"] for e in ours["extra_logprobs"]], oracle)
