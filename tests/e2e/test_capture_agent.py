"""An unmodified tool-calling agent, written with the plain openai SDK, captured against the
LocalBackend's server and trained: the ids trained are the ids sampled, byte for byte.

The tiny model is taught the agent's script (tests/e2e/_scripted_model.py), so it really calls
the tool twice and then answers; the agent's own HTTP client keeps an independent record of
every raw response (an httpx event hook), which is the oracle for what was sampled.
"""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from typing import Any

import httpx2
import pytest

pytest.importorskip("torch")
pytest.importorskip("fastapi")

import arthex
from arthex.adapters.local import packing
from arthex.adapters.parquet.store import read_part
from arthex.core.capture import token_samples
from arthex.core.trajectories import Trajectory, TrajectoryGroup
from tests.e2e._scripted_model import scripted_model
from tests.e2e._weather import (
    FINAL,
    QUESTION,
    SCRIPT,
    SUMMARY,
    SYSTEM,
    TOOLS,
    WEATHER,
    local_model,
)  # fmt: skip

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


async def weather_agent(
    client: Any, model: str, *, compress_history: bool = False, temperature: float = 0.0
) -> str:
    """A plain tool loop. With `compress_history` it replaces the tool exchanges by a summary
    before its last turn, as agents that manage their context do."""
    messages: list[dict[str, Any]] = [SYSTEM, QUESTION]
    for turn in range(4):
        if compress_history and turn == 2:
            messages = [SYSTEM, QUESTION, SUMMARY]
        response = await client.chat.completions.create(
            model=model, messages=messages, tools=TOOLS, logprobs=True,
            temperature=temperature, max_tokens=48,
        )  # fmt: skip
        message = response.choices[0].message
        if not message.tool_calls:
            return str(message.content or "")
        calls = [
            {"id": c.id, "type": "function",
             "function": {"name": c.function.name, "arguments": c.function.arguments}}
            for c in message.tool_calls
        ]  # fmt: skip
        messages.append({"role": "assistant", "content": message.content, "tool_calls": calls})
        for call in message.tool_calls:
            city = json.loads(call.function.arguments).get("city", "")
            messages.append(
                {"role": "tool", "tool_call_id": call.id, "content": WEATHER.get(city, "?")}
            )
    return ""


@pytest.fixture(scope="module")
def base_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    return scripted_model(tmp_path_factory.getbasetemp() / "scripted", SCRIPT)


class Recorder:
    """The agent's client, with an event hook keeping each raw response: the oracle."""

    def __init__(self) -> None:
        self.responses: list[dict[str, Any]] = []

    async def hook(self, response: httpx2.Response) -> None:
        await response.aread()
        if response.request.url.path.endswith("/chat/completions"):
            self.responses.append(json.loads(response.content))

    def client(self, base_url: str, api_key: str) -> Any:
        from openai import AsyncOpenAI

        return AsyncOpenAI(
            base_url=base_url,
            api_key=api_key,
            http_client=httpx2.AsyncClient(event_hooks={"response": [self.hook]}, timeout=120),
        )


def sampled_ids(response: dict[str, Any]) -> list[int]:
    return list(response["choices"][0]["token_ids"])


def test_a_captured_agent_trains_on_exactly_what_it_sampled(
    base_model: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    packed: list[packing.PackedBatch] = []
    real_pack = packing.pack

    def spy(*args: Any, **kwargs: Any) -> packing.PackedBatch:
        batch = real_pack(*args, **kwargs)
        packed.append(batch)
        return batch

    monkeypatch.setattr(packing, "pack", spy)
    recorders = [Recorder() for _ in range(3)]

    async def main() -> tuple[TrajectoryGroup, arthex.TrainResult, list[Any]]:
        backend, model = local_model(base_model, tmp_path / "art", "weather")
        try:
            await model.register(backend)
            endpoint = model.openai_client()
            base_url, key = str(endpoint.base_url), endpoint.api_key
            name = model.get_inference_name()
            group = await arthex.capture_trajectory_group(
                [
                    weather_agent(recorders[0].client(base_url, key), name),
                    weather_agent(recorders[1].client(base_url, key), name),
                    weather_agent(recorders[2].client(base_url, key), name, compress_history=True),
                    # and one through the model's own client, sampling at temperature 1
                    weather_agent(endpoint, name, temperature=1.0),
                ],
                reward=lambda answer: float(answer == FINAL),
            )
            # The reward prefers agents that keep their history (any preference would do: the
            # group needs rewards that differ to train).
            for trajectory, reward in zip(group.trajectories, (1.0, 1.0, 0.0, 0.5)):
                trajectory.reward = reward
            result = await model.train([group], config=arthex.TrainConfig(learning_rate=1e-3))
            history = list(await model.history())
            return group, result, history
        finally:
            await model.close()
            await backend.close()

    group, result, history = asyncio.run(main())
    keeps, _again, compressed, sampled = group.trajectories
    assert not group.exceptions

    # The agent really ran its tool loop: two tool calls, then the answer.
    assert len(keeps.exchanges.chat_completions) == 3
    first = keeps.exchanges.chat_completions[0].response.choices[0].message
    assert (
        first.tool_calls and first.tool_calls[0].model_dump()["function"]["name"] == "get_weather"
    )
    assert keeps.exchanges.chat_completions[2].response.choices[0].message.content == FINAL

    # Exact tokens: one sample per trajectory whose trained ids are the sampled ids.
    oracle = recorders[0].responses
    (sample,) = token_samples(keeps, "keeps")
    assert list(sample.sampled) == [t for r in oracle for t in sampled_ids(r)]
    assert list(sample.tokens) == oracle[-1]["prompt_token_ids"] + sampled_ids(oracle[-1])
    assert sample.choices == 3
    # The tool results sit in the sample, untrained.
    between = oracle[1]["prompt_token_ids"][len(oracle[0]["prompt_token_ids"]) + len(
        sampled_ids(oracle[0])):]  # fmt: skip
    start = len(oracle[0]["prompt_token_ids"]) + len(sampled_ids(oracle[0]))
    assert list(sample.tokens[start : start + len(between)]) == between
    assert not any(sample.trained[start : start + len(between)])

    # A rewritten history splits into two samples, nothing lost, nothing trained twice.
    rewritten = recorders[2].responses
    before, after = token_samples(compressed, "compressed")
    assert list(before.sampled) == sampled_ids(rewritten[0]) + sampled_ids(rewritten[1])
    assert list(after.tokens) == rewritten[2]["prompt_token_ids"] + sampled_ids(rewritten[2])
    assert list(after.sampled) == sampled_ids(rewritten[2])

    # What the trainer trained: every row is one of those samples, masked exactly there, with
    # the sampler's logprobs on the trained positions.
    (batch,) = packed
    every = [s for t in group.trajectories for s in token_samples(t, "t")]
    samples = {s.tokens: s for s in every}  # the two greedy runs sampled the same ids
    trained_rows = 0
    for row in range(batch.num_rows):
        tokens = tuple(batch.tokens[row][batch.segment_ids[row] == 0].tolist())
        expected = samples[tokens]
        assert batch.mask[row][: len(tokens)].tolist() == list(expected.trained)
        old = batch.old_logprobs[row][: len(tokens)][batch.mask[row][: len(tokens)]].tolist()
        want = [lp for lp, on in zip(expected.logprobs, expected.trained) if on]
        assert old == pytest.approx(want, abs=1e-6)
        trained_rows += 1
    assert trained_rows == len(every)
    all_logprobs = [
        entry["logprob"] for r in oracle for entry in r["choices"][0]["logprobs"]["content"]
    ]
    assert [lp for lp, on in zip(sample.logprobs, sample.trained) if on] == all_logprobs

    # Training ran on the captured group and the step advanced.
    assert result.step == 1
    loss = result.metrics.get("loss/train")
    assert loss is not None and math.isfinite(loss)
    assert any(row.step == 0 and "train/reward" in row.values for row in history)
    assert sampled.exchanges.chat_completions  # model.openai_client()'s calls are captured too

    # The captured group was logged, and reads back as it was.
    part = tmp_path / "art" / "capture" / "models" / "weather" / "trajectories" / "train"
    (stored,) = read_part(part / "0000.parquet")
    assert [t.exchanges for t in stored.trajectories] == [t.exchanges for t in group.trajectories]
    assert Trajectory.model_validate(stored.trajectories[0].model_dump()).reward == 1.0
