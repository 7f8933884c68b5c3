"""From recorded calls to training samples: exact sampled ids, merged while prompts extend,
split when the history is rewritten, tool results untrained; and the trainers' inputs."""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

import httpx2
import pytest
from openai import AsyncOpenAI

import arthex
from arthex.core.capture import conversations, token_samples, training_groups
from arthex.core.config import TrainConfig
from arthex.core.errors import InvalidInputError
from arthex.core.trajectories import CapturedException, Trajectory, TrajectoryGroup
from tests._chat_script import ChatScript, tokens, tool_call

BASE = "http://agent.test/v1"
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]


def weather_reply(request: dict[str, Any]) -> tuple[str | None, list[dict[str, Any]]]:
    done = sum(1 for m in request["messages"] if m["role"] == "tool")
    if done < 2:
        city = ["Paris", "Oslo"][done]
        return None, [tool_call(f"call_{done}", "get_weather", {"city": city})]
    return f"sunny{request['choice'] or ''}", []


async def weather_agent(openai: AsyncOpenAI, *, rewrite: bool = False, n: int = 1) -> str:
    """Three turns: two tool calls, then an answer. With `rewrite`, the agent compresses its
    history before the last turn, as agents that manage their context do."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You check the weather."},
        {"role": "user", "content": "Paris or Oslo?"},
    ]
    for turn in range(3):
        if rewrite and turn == 2:
            messages = [messages[0], messages[1], {"role": "user", "content": "Both are sunny."}]
        response = await openai.chat.completions.create(
            model="agent@0", messages=messages, tools=TOOLS, logprobs=True,  # type: ignore[arg-type]
            n=n if turn == 2 else 1,
        )  # fmt: skip
        message = response.choices[0].message
        if not message.tool_calls:
            return message.content or ""
        messages.append(
            {"role": "assistant", "content": message.content,
             "tool_calls": [c.model_dump() for c in message.tool_calls]}
        )  # fmt: skip
        for call in message.tool_calls:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": "sunny, 21C"})
    return ""


def captured(script: ChatScript, **options: Any) -> Trajectory:
    async def main() -> Trajectory:
        openai = AsyncOpenAI(
            base_url=BASE, api_key="k", http_client=httpx2.AsyncClient(transport=script.transport())
        )
        return await arthex.capture_trajectory(
            weather_agent(openai, **options), reward=lambda a: float(a == "sunny"),
            endpoints=[BASE],
        )  # fmt: skip

    return asyncio.run(main())


def test_three_tool_turns_become_one_sample_trained_on_exactly_the_sampled_ids() -> None:
    script = ChatScript(weather_reply)
    trajectory = captured(script)
    assert trajectory.reward == 1.0 and len(trajectory.exchanges.chat_completions) == 3
    (sample,) = token_samples(trajectory, "t")
    last = script.sampled[-1]
    assert list(sample.tokens) == last["prompt"] + last["choices"][0]["token_ids"]
    assert list(sample.sampled) == [t for s in script.sampled for t in s["choices"][0]["token_ids"]]
    assert sample.choices == 3
    # The tool results are in the sample and never trained.
    text = bytes(sample.tokens).decode()
    start = text.index("<tool>sunny, 21C</>")
    assert not any(sample.trained[start : start + len("<tool>sunny, 21C</>")])
    trained = [lp for lp, on in zip(sample.logprobs, sample.trained) if on]
    assert trained == [-0.25] * len(sample.sampled)
    assert all(math.isnan(lp) for lp, on in zip(sample.logprobs, sample.trained) if not on)


def test_a_rewritten_history_splits_into_two_samples_without_losing_a_sampled_token() -> None:
    script = ChatScript(weather_reply)
    trajectory = captured(script, rewrite=True)
    first, second = token_samples(trajectory, "t")
    calls = [s["choices"][0]["token_ids"] for s in script.sampled]
    assert list(first.sampled) == calls[0] + calls[1] and first.choices == 2
    assert list(second.sampled) == calls[2] and second.choices == 1
    assert list(second.tokens) == script.sampled[2]["prompt"] + calls[2]
    assert not any(second.trained[: len(script.sampled[2]["prompt"])])
    assert len(conversations(trajectory)) == 2


def test_several_choices_of_one_call_branch_into_separate_samples() -> None:
    script = ChatScript(weather_reply)
    trajectory = captured(script, n=2)
    merged, branch = token_samples(trajectory, "t")
    choices = script.sampled[-1]["choices"]
    assert list(merged.sampled)[-len(choices[0]["token_ids"]) :] == choices[0]["token_ids"]
    assert list(branch.sampled) == choices[1]["token_ids"]
    assert list(branch.tokens) == script.sampled[-1]["prompt"] + choices[1]["token_ids"]


def test_conversations_rebuild_the_chat_with_tool_calls_and_results() -> None:
    trajectory = captured(ChatScript(weather_reply))
    (conversation,) = conversations(trajectory)
    roles = [m["role"] for m in conversation.messages]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert conversation.messages[2]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert conversation.messages[-1]["content"] == "sunny"
    assert conversation.tools == tuple(TOOLS)
    assert trajectory.messages() == list(conversation.messages)


def _edited(trajectory: Trajectory, edit: Any) -> Trajectory:
    data = json.loads(trajectory.model_dump_json())
    edit(data["exchanges"]["chat_completions"][1]["response"])
    return Trajectory.model_validate(data)


def test_missing_token_ids_or_logprobs_are_refused_naming_the_call() -> None:
    trajectory = captured(ChatScript(weather_reply))
    no_ids = _edited(trajectory, lambda r: r["choices"][0].pop("token_ids"))
    with pytest.raises(InvalidInputError, match=r"group 0, trajectory 1, call 1, choice 0 lacks"):
        token_samples(no_ids, "group 0, trajectory 1")
    no_logprobs = _edited(trajectory, lambda r: r["choices"][0].update(logprobs=None))
    with pytest.raises(InvalidInputError, match="no token logprobs"):
        token_samples(no_logprobs, "t")
    (sample,) = token_samples(no_logprobs, "t", allow_without_logprobs=True)
    assert sum(math.isnan(lp) for lp in sample.logprobs) > sum(not t for t in sample.trained)
    other = Trajectory.model_validate({"exchanges": {"responses": [{"request": {}}]}})
    with pytest.raises(InvalidInputError, match="responses API"):
        token_samples(other, "t")


def test_trajectories_cannot_hold_exchanges_and_a_hand_built_conversation() -> None:
    trajectory = captured(ChatScript(weather_reply))
    with pytest.raises(ValueError, match="not both"):
        Trajectory.model_validate({**json.loads(trajectory.model_dump_json()), "tools": TOOLS})


def test_incomplete_trajectories_are_left_out_of_training_unless_asked() -> None:
    done = captured(ChatScript(weather_reply))
    crashed = captured(ChatScript(weather_reply))
    crashed.metadata["capture_incomplete"] = True
    partial = captured(ChatScript(weather_reply))
    error = CapturedException.from_exception(RuntimeError("x"), trajectory=partial)
    group = TrajectoryGroup([done, crashed], exceptions=[error])
    clean = TrajectoryGroup([done])

    (default,) = training_groups([group], TrainConfig())
    assert default.trajectories == [done] and default.exceptions == group.exceptions
    assert training_groups([clean], TrainConfig())[0] is clean
    (everything,) = training_groups([group], TrainConfig(train_incomplete_trajectories=True))
    assert everything.trajectories == [done, crashed, partial]


def test_the_local_packer_trains_the_captured_sample_as_sampled() -> None:
    torch = pytest.importorskip("torch")
    from arthex.adapters.local.packing import pack

    scripts = [ChatScript(weather_reply), ChatScript(weather_reply)]
    trajectories = [captured(script, rewrite=i == 1) for i, script in enumerate(scripts)]
    trajectories[1].reward = 0.0
    batch = pack([TrajectoryGroup(trajectories)], TrainConfig(), max_length=4096, pad_token_id=0)
    assert batch.num_rows == 3  # one sample, then the rewritten trajectory's two
    rows = {
        tuple(batch.tokens[r][batch.segment_ids[r] == 0].tolist()): batch.mask[r]
        for r in range(batch.num_rows)
    }
    expected = [s for t in trajectories for s in token_samples(t, "t")]
    for sample in expected:
        mask = rows[sample.tokens][: len(sample)]
        assert mask.tolist() == list(sample.trained)
    assert torch.isfinite(batch.old_logprobs[batch.mask]).all()


def test_tinker_datums_carry_each_recorded_choice_with_its_own_prompt() -> None:
    pytest.importorskip("tinker")
    from arthex.adapters.tinker.datums import build_batch

    script = ChatScript(weather_reply)
    trajectory = captured(script)
    other = captured(ChatScript(weather_reply))
    other.reward = 0.0
    batch = build_batch([TrajectoryGroup([trajectory, other])], TrainConfig())
    mine = batch.parts[:3]
    for part, call in zip(mine, script.sampled):
        assert part.tokens == call["prompt"] + call["choices"][0]["token_ids"]
        assert part.prompt_length == len(call["prompt"])


def test_prompt_ids_on_each_choice_are_used_as_arthex_servers_send_them() -> None:
    trajectory = captured(ChatScript(weather_reply))
    data = json.loads(trajectory.model_dump_json())
    for exchange in data["exchanges"]["chat_completions"]:
        prompt = exchange["response"].pop("prompt_token_ids")
        exchange["response"]["choices"][0]["prompt_token_ids"] = prompt
    moved = Trajectory.model_validate(data)
    assert token_samples(moved, "t") == token_samples(trajectory, "t")
    assert [c.model_extra for c in moved.choices()] == [c.model_extra for c in trajectory.choices()]
    assert tokens("<assistant>") == list(b"<assistant>")


def test_interleaved_conversations_in_one_scope_each_grow_their_own_sample() -> None:
    """An agent and the sub-agent it runs take turns; each call extends its own line."""
    script = ChatScript(lambda request: (f"ok{len(request['messages'])}", []))

    async def main() -> Trajectory:
        openai = AsyncOpenAI(
            base_url=BASE, api_key="k", http_client=httpx2.AsyncClient(transport=script.transport())
        )
        lines: dict[str, list[dict[str, Any]]] = {
            "main": [{"role": "user", "content": "plan a trip"}],
            "sub": [{"role": "user", "content": "find trains"}],
        }
        async with arthex.capture(endpoints=[BASE]) as trajectory:
            for _ in range(2):
                for messages in lines.values():
                    response = await openai.chat.completions.create(
                        model="m",
                        messages=messages,  # type: ignore[arg-type]
                        logprobs=True,
                    )
                    messages.append(
                        {"role": "assistant", "content": response.choices[0].message.content}
                    )
                    messages.append({"role": "user", "content": "go on"})
        return trajectory

    trajectory = asyncio.run(main())
    main_line, sub_line = token_samples(trajectory, "t")
    ids = [call["choices"][0]["token_ids"] for call in script.sampled]
    assert list(main_line.sampled) == ids[0] + ids[2] and main_line.choices == 2
    assert list(sub_line.sampled) == ids[1] + ids[3] and sub_line.choices == 2
    assert [len(c.messages) for c in conversations(trajectory)] == [4, 4]
