"""Scenario builders: trajectories and groups shaped like what an inference server returns.

Choices carry what a trainer needs (logprobs with `token_id:` tokens, `prompt_token_ids` and
`token_ids` in `model_extra`), so the same builders serve store, history and backend tests.
Default token ids are the UTF-8 bytes of the text: deterministic, and valid in any vocabulary
of at least 256 tokens.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from openai.types.chat.chat_completion import Choice

from ..core.trajectories import (
    History,
    MessageOrChoice,
    MetadataValue,
    MetricValue,
    Trajectory,
    TrajectoryGroup,
)


def byte_tokens(text: str) -> list[int]:
    """Token ids for `text`: its UTF-8 bytes."""
    return list(text.encode("utf-8"))


def make_choice(
    content: str | None = "Sure.",
    *,
    tool_calls: Sequence[Mapping[str, Any]] = (),
    token_ids: Sequence[int] | None = None,
    prompt_token_ids: Sequence[int] | None = None,
    logprobs: Sequence[float] | float | None = -0.5,
    finish_reason: str | None = None,
    index: int = 0,
    message_extra: Mapping[str, Any] | None = None,
) -> Choice:
    """An assistant Choice as a server returns it.

    `tool_calls` are `{"name": ..., "arguments": ...}` (or full OpenAI tool-call dicts).
    `token_ids` default to the bytes of `content`; `logprobs` is one value per token, a single
    value for all of them, or None for a Choice without logprobs. `finish_reason` defaults to
    `"tool_calls"` when there are tool calls, else `"stop"`.
    """
    tokens = list(token_ids) if token_ids is not None else byte_tokens(content or "")
    calls = [_tool_call(i, call) for i, call in enumerate(tool_calls)]
    message: dict[str, Any] = {"role": "assistant", "content": content, **(message_extra or {})}
    if calls:
        message["tool_calls"] = calls
    data: dict[str, Any] = {
        "finish_reason": finish_reason or ("tool_calls" if calls else "stop"),
        "index": index,
        "message": message,
        "logprobs": _logprobs(tokens, logprobs),
        "token_ids": tokens,
        "prompt_token_ids": list(prompt_token_ids) if prompt_token_ids is not None else [],
    }
    return Choice.model_validate(data)


def _tool_call(index: int, call: Mapping[str, Any]) -> dict[str, Any]:
    if "function" in call:
        return dict(call)
    return {
        "id": call.get("id", f"call_{index}"),
        "type": "function",
        "function": {"name": call["name"], "arguments": call.get("arguments", "{}")},
    }


def _logprobs(tokens: Sequence[int], logprobs: Sequence[float] | float | None) -> Any:
    if logprobs is None:
        return None
    values = [float(logprobs)] * len(tokens) if isinstance(logprobs, int | float) else logprobs
    if len(values) != len(tokens):
        raise ValueError(f"{len(values)} logprobs for {len(tokens)} tokens")
    return {
        "content": [
            {"token": f"token_id:{token}", "logprob": value, "bytes": None, "top_logprobs": []}
            for token, value in zip(tokens, values)
        ],
        "refusal": None,
    }


def make_trajectory(
    reward: float = 0.0,
    *,
    prompt: str = "What is 2 + 2?",
    completion: str | None = "4",
    system: str | None = None,
    choice: Choice | None = None,
    messages: Sequence[MessageOrChoice] | None = None,
    tools: list[dict[str, Any]] | None = None,
    additional_histories: Sequence[History] = (),
    metrics: Mapping[str, MetricValue] | None = None,
    metadata: Mapping[str, MetadataValue] | None = None,
    logs: Sequence[str] = (),
) -> Trajectory:
    """A one-turn rollout: [system], user `prompt`, then the model's Choice answering it.

    `messages` replaces the whole conversation; `choice` replaces the default Choice, whose
    `prompt_token_ids` are the bytes of the prompt text.
    """
    if messages is None:
        context: list[MessageOrChoice] = []
        if system is not None:
            context.append({"role": "system", "content": system})
        context.append({"role": "user", "content": prompt})
        answer = choice or make_choice(
            completion, prompt_token_ids=byte_tokens((system or "") + prompt)
        )
        messages = [*context, answer]
    return Trajectory(
        messages_and_choices=list(messages),
        tools=tools,
        additional_histories=list(additional_histories),
        reward=reward,
        metrics=dict(metrics or {}),
        metadata=dict(metadata or {}),
        logs=list(logs),
    )


def make_exception(
    message: str = "rollout failed", kind: type[Exception] = RuntimeError
) -> Exception:
    """An exception that was really raised, so it carries a traceback like a failed rollout."""
    try:
        raise kind(message)
    except Exception as error:
        return error


def make_group(
    rewards: Sequence[float] = (0.0, 1.0),
    *,
    prompt: str = "What is 2 + 2?",
    exceptions: Sequence[BaseException] = (),
    metadata: dict[str, MetadataValue] | None = None,
    metrics: dict[str, MetricValue] | None = None,
    logs: list[str] | None = None,
) -> TrajectoryGroup:
    """One scenario's rollouts: a trajectory per reward (completions differ), then failures."""
    trajectories = [
        make_trajectory(reward, prompt=prompt, completion=f"answer {i}")
        for i, reward in enumerate(rewards)
    ]
    return TrajectoryGroup(
        [*trajectories, *exceptions], metadata=metadata, metrics=metrics, logs=logs
    )


WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"enum": ["C", "F"]}},
            "required": ["city"],
        },
    },
}

UNICODE_TEXT = 'Grüße, 世界! مرحبا 👩‍💻 e\u0301 \u200b\ttab\nnew line "quoted" \\ back'


def rich_trajectory(reward: float = 0.75) -> Trajectory:
    """Every feature a store must keep: tools, a tool-calling Choice with content None, tool
    results, logprobs, token ids, message extras, a sub-agent history with its own tools and
    Choice, unicode, and metadata/metrics of every scalar type."""
    call = make_choice(
        None,
        tool_calls=[{"name": "get_weather", "arguments": '{"city": "Zürich", "unit": "C"}'}],
        token_ids=[101, 102, 103],
        prompt_token_ids=[1, 2, 3, 4],
        logprobs=[-0.25, -1.5, -3.0e-7],
        message_extra={"reasoning_content": "The user wants weather → call the tool."},
    )
    answer = make_choice(
        UNICODE_TEXT,
        prompt_token_ids=[1, 2, 3, 4, 101, 102, 103, 7, 8],
        index=0,
    )
    sub_agent = History(
        messages_and_choices=[
            {"role": "system", "content": "You summarise."},
            {"role": "user", "content": "Summarise: 晴れ"},
            make_choice("Sunny.", prompt_token_ids=[9, 9, 9], logprobs=-0.125),
        ],
        tools=[{"type": "function", "function": {"name": "noop", "parameters": {}}}],
    )
    return make_trajectory(
        reward,
        messages=[
            {"role": "system", "content": "You are a weather bot."},
            {"role": "user", "content": UNICODE_TEXT},
            call,
            {"role": "tool", "tool_call_id": "call_0", "content": '{"temp": 21.5}'},
            answer,
        ],
        tools=[WEATHER_TOOL],
        additional_histories=[sub_agent, History()],
        metrics={"correct": True, "turns": 3, "latency_s": 1.25, "zero": 0.0, "flag": False},
        metadata={
            "scenario": "weather-7",
            "seed": 42,
            "temperature": 0.7,
            "ok": True,
            "note": None,
        },
        logs=["called get_weather", UNICODE_TEXT],
    )


def rich_groups() -> list[TrajectoryGroup]:
    """A logged batch with every shape a store must round-trip, in a meaningful order:
    a rich group with a failure, a group where every rollout failed, an empty group, a
    minimal trajectory with only defaults, and multimodal / context-only messages."""
    rich = TrajectoryGroup(
        [rich_trajectory(0.75), make_exception("timeout", TimeoutError), rich_trajectory(-1.0)],
        metadata={"scenario_id": "s-1", "difficulty": 3, "weight": 0.5, "held_out": False},
        metrics={"solved": True, "attempts": 2, "mean_len": 12.5},
        logs=["group log", "ünïcödé"],
    )
    all_failed = TrajectoryGroup(
        [make_exception("boom", ValueError), make_exception("no tool", KeyError)],
        metadata={"scenario_id": "s-2"},
        metrics={"failed": True},
        logs=["every rollout failed"],
    )
    empty = TrajectoryGroup()
    minimal = TrajectoryGroup([Trajectory()])
    multimodal = TrajectoryGroup(
        [
            make_trajectory(
                1.0,
                messages=[
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "What is in this image?"},
                            {
                                "type": "image_url",
                                "image_url": {"url": "data:image/png;base64,AA=="},
                            },
                        ],
                    },
                    make_choice("A cat."),
                ],
            ),
            make_trajectory(
                0.0,
                messages=[
                    {"role": "user", "content": "Plan?"},
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": "ctx_1",
                                "type": "function",
                                "function": {"name": "plan", "arguments": "{}"},
                            }
                        ],
                    },
                    {"role": "tool", "tool_call_id": "ctx_1", "content": "done"},
                    make_choice("Done.", logprobs=None),
                ],
                tools=[],
            ),
        ],
        exceptions=[make_exception("late failure")],
    )
    return [rich, all_failed, empty, minimal, multimodal]


def sampled_choice(
    content: str, *, prompt_token_ids: list[int], token_ids: list[int], logprobs: list[float]
) -> Choice:
    """A Choice as an arthex inference server returns it: logprobs per token (`token_id:N`)
    and the prompt and completion token ids as extra fields."""
    return Choice.model_validate(
        {
            "index": 0,
            "finish_reason": "stop",
            "message": {"role": "assistant", "content": content},
            "logprobs": {
                "content": [
                    {"token": f"token_id:{t}", "logprob": lp, "bytes": None, "top_logprobs": []}
                    for t, lp in zip(token_ids, logprobs, strict=True)
                ]
            },
            "prompt_token_ids": prompt_token_ids,
            "token_ids": token_ids,
        }
    )


def synthetic_groups(
    n_groups: int = 2, size: int = 4, *, equal: bool = False, offset: int = 0
) -> list[TrajectoryGroup]:
    """Groups whose Choices carry prompt/completion token ids in [10, 60) and logprobs."""
    groups = []
    for g in range(n_groups):
        trajectories = []
        for i in range(size):
            completion = [10 + (offset + g * 7 + i * 3 + k) % 50 for k in range(4)]
            choice = sampled_choice(
                f"answer {i}",
                prompt_token_ids=[1, 11 + g, 12, 13],
                token_ids=completion,
                logprobs=[-1.0 - 0.1 * k for k in range(len(completion))],
            )
            trajectories.append(
                Trajectory(
                    messages_and_choices=[{"role": "user", "content": f"question {g}"}, choice],
                    reward=1.0 if equal else float(i % 2),
                )
            )
        groups.append(TrajectoryGroup(trajectories))
    return groups
