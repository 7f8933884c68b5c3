"""ART's trajectory-to-Datum conversions for Tinker (`art.tinker_native.data`), on the datums
TinkerBackend itself trains on (datums.py).

- `trajectory_groups_to_datums(groups)`: the Datums `TinkerBackend.train` would send for the
  groups: one per trained Choice, from the token ids the Choice was sampled with
  (`prompt_token_ids`, `token_ids`) and its logprobs, with the group-relative advantage.
- `build_datum(prompt, completion, logprobs, advantage)`: one such Datum from its parts.
- `compute_advantages(rewards, normalize_advantages)`: the group-relative advantages.
- `iter_trajectory_histories(trajectory)`: its main conversation as a History, then its
  additional histories.

ART's renderer path, for a tinker-cookbook renderer (and its tokenizer) that you build
(`tinker_cookbook.renderers.get_renderer(name, tokenizer)`; arthex's TinkerBackend uses none):

- `history_to_datum(history, advantage, renderer, tokenizer)`: the Datum for the history's last
  Choice, its prompt rendered again by the renderer from the messages before that Choice.
- `find_last_choice(messages_and_choices)`: that Choice and its index.
- `extract_logprobs_from_choice(choice, tokenizer)`: the Choice's sampled ids and logprobs, read
  from its logprob entries (`token_id:<id>` tokens, or token strings the tokenizer maps).
- `convert_openai_messages_to_renderer_format(messages, tools, renderer)`: OpenAI chat
  messages as the renderer's messages, the tools declared by the renderer's own prefix.
- `create_conversation_prefix_with_tools(renderer, tools, system_prompt)`: that prefix.
- `parse_completion_to_openai_message(completion_tokens, renderer)`: sampled ids parsed back
  into an OpenAI assistant message.

A Datum holds `model_input = all[:-1]` and, as loss inputs, `target_tokens = all[1:]` and the
sampled logprobs and advantages, zero over the prompt's first P-1 positions (`all` the prompt's
P tokens and then the completion's): ready for `forward_backward` with Tinker's losses.
"""

from __future__ import annotations

import importlib
import json
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from ...core.advantages import group_advantages
from ...core.chat_types import as_message
from ...core.config import TrainConfig
from ...core.errors import InvalidInputError, require_extra
from ...core.trajectories import History, Trajectory, TrajectoryGroup

require_extra("tinker", "tinker", "numpy")  # without the SDK: the extra to install, in one line

import numpy as np  # noqa: E402
from openai.types.chat.chat_completion import Choice  # noqa: E402
from tinker import types  # noqa: E402

from .datums import DatumParts, build_batch, checked_logprobs  # noqa: E402

__all__ = [
    "build_datum",
    "compute_advantages",
    "convert_openai_messages_to_renderer_format",
    "create_conversation_prefix_with_tools",
    "extract_logprobs_from_choice",
    "find_last_choice",
    "history_to_datum",
    "iter_trajectory_histories",
    "parse_completion_to_openai_message",
    "trajectory_groups_to_datums",
]

_TOKEN_ID_PREFIX = "token_id:"


def compute_advantages(rewards: Sequence[float], normalize_advantages: bool = True) -> list[float]:
    """`r - mean(rewards)`, divided by the population std (+ 1e-6) when `normalize_advantages`;
    all 0.0 when the rewards are all equal (within 1e-12) or fewer than two."""
    return group_advantages(list(rewards), scale=normalize_advantages)


def build_datum(
    prompt_tokens: Sequence[int],
    completion_tokens: Sequence[int],
    logprobs: Sequence[float],
    advantage: float,
) -> types.Datum | None:
    """The Datum that trains `completion_tokens` (sampled after `prompt_tokens` with
    `logprobs`) with `advantage`; None when the prompt or the completion is empty."""
    if not prompt_tokens or not completion_tokens:
        return None
    tokens = [*_ids(prompt_tokens, "prompt_tokens"), *_ids(completion_tokens, "completion_tokens")]
    values = checked_logprobs([float(v) for v in logprobs], len(completion_tokens))
    if not math.isfinite(advantage):
        raise InvalidInputError(f"advantage is {advantage!r}, not a finite number")
    return DatumParts(
        tokens=tokens,
        prompt_length=len(prompt_tokens),
        sampled_logprobs=np.asarray(values, dtype=np.float32),
        advantages=np.full(len(completion_tokens), advantage, dtype=np.float32),
    ).datum()


def trajectory_groups_to_datums(
    trajectory_groups: Iterable[TrajectoryGroup],
    renderer: object = None,
    tokenizer: object = None,
    normalize_advantages: bool = True,
    *,
    base_model: str | None = None,
    model: object = None,
) -> list[types.Datum]:
    """The Datums TinkerBackend trains on for these groups: one per Choice of every trajectory
    whose advantage is not 0 (its additional histories' Choices too).

    `renderer`, `tokenizer` and `base_model` (ART renders or tokenizes each prompt again) are
    not needed: every Choice carries the ids it was sampled with. A Choice without them, or
    without logprobs, is an InvalidInputError naming it. `model` (ART's pick of one model's
    calls in a trajectory that recorded several) is refused: every Choice is trained."""
    if model is not None:
        raise InvalidInputError(
            f"model={model!r}: arthex trains every Choice of a trajectory; keep only the "
            "trajectories (or Choices) of the model to train in the groups you pass"
        )
    groups = list(trajectory_groups)
    if not groups:
        return []
    config = TrainConfig(scale_rewards=normalize_advantages)
    return [part.datum() for part in build_batch(groups, config).parts]


def iter_trajectory_histories(trajectory: Trajectory) -> Iterator[History]:
    """The trajectory's main conversation (its messages and choices, and its tools) as a
    History, then each of its `additional_histories`."""
    yield History(messages_and_choices=trajectory.messages_and_choices, tools=trajectory.tools)
    yield from trajectory.additional_histories


def find_last_choice(messages_and_choices: Sequence[object]) -> tuple[int, Choice] | None:
    """The last Choice of a conversation and its index there; None when it has no Choice."""
    for index in reversed(range(len(messages_and_choices))):
        item = messages_and_choices[index]
        if isinstance(item, Choice):
            return index, item
    return None


def extract_logprobs_from_choice(choice: Choice, tokenizer: Any) -> tuple[list[int], list[float]]:
    """The sampled token ids and their logprobs, from the Choice's logprob entries (`content`,
    else `refusal`): an entry's token `token_id:<id>` is that id, any other token string is
    the tokenizer's id for it (`convert_tokens_to_ids`). An entry whose id cannot be read (a
    malformed `token_id:`, a string the tokenizer maps to None) is left out; a Choice without
    logprobs gives two empty lists."""
    if not isinstance(choice, Choice):
        raise InvalidInputError(f"choice must be an openai Choice, got {type(choice).__name__}")
    if choice.logprobs is None:
        return [], []
    entries = choice.logprobs.content or choice.logprobs.refusal or []
    tokens: list[int] = []
    logprobs: list[float] = []
    for entry in entries:
        text = entry.token or ""
        token_id: Any
        if text.startswith(_TOKEN_ID_PREFIX):
            digits = text[len(_TOKEN_ID_PREFIX) :].split(":")[0]
            try:
                token_id = int(digits)
            except ValueError:
                continue
        else:
            token_id = tokenizer.convert_tokens_to_ids(text)
            if token_id is None:
                continue
        tokens.append(int(token_id))
        logprobs.append(entry.logprob)
    return tokens, logprobs


def create_conversation_prefix_with_tools(
    renderer: Any, tools: list[dict[str, Any]], system_prompt: str = ""
) -> list[dict[str, Any]]:
    """The messages the renderer puts before a conversation to declare `tools` (tool specs:
    name, description, parameters) with `system_prompt`: its own
    `create_conversation_prefix_with_tools`."""
    make = _renderer_method(renderer, "create_conversation_prefix_with_tools")
    prefix: list[dict[str, Any]] = make(tools, system_prompt)
    return prefix


def convert_openai_messages_to_renderer_format(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, renderer: Any
) -> list[dict[str, Any]]:
    """OpenAI chat messages as the renderer's messages.

    With `tools` and a first message from the system, that message is replaced by the
    renderer's tool prefix (`create_conversation_prefix_with_tools`, with the system content
    as its prompt and each tool's `function` spec); without a system message the tools are
    not declared, as in ART. Then: system and user messages keep their role and content; an
    assistant message keeps its content ("" for none) and its tool calls become the
    cookbook's `ToolCall`s (arguments as a JSON string); a tool message keeps its content,
    `tool_call_id` and `name` ("" for a missing one). Messages of other roles are dropped."""
    if not isinstance(messages, list):
        raise InvalidInputError(f"messages must be a list, got {type(messages).__name__}")
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise InvalidInputError(
                f"messages[{index}] must be a chat message dict, got {type(message).__name__}"
            )
    converted: list[dict[str, Any]] = []
    rest = messages
    if tools and messages and messages[0].get("role") == "system":
        specs = [
            tool.get("function", {}) if tool.get("type") == "function" else tool for tool in tools
        ]
        converted.extend(
            create_conversation_prefix_with_tools(
                renderer, specs, system_prompt=messages[0].get("content", "")
            )
        )
        rest = messages[1:]
    for message in rest:
        role = message.get("role")
        content = message.get("content", "")
        if role in ("system", "user"):
            converted.append({"role": role, "content": content})
        elif role == "assistant":
            turn: dict[str, Any] = {"role": "assistant", "content": content or ""}
            if message.get("tool_calls"):
                turn["tool_calls"] = [_tool_call(call) for call in message["tool_calls"]]
            converted.append(turn)
        elif role == "tool":
            converted.append(
                {
                    "role": "tool",
                    "content": content,
                    "tool_call_id": message.get("tool_call_id", ""),
                    "name": message.get("name", ""),
                }
            )
    return converted


def parse_completion_to_openai_message(
    completion_tokens: list[int], renderer: Any
) -> dict[str, Any]:
    """Sampled token ids parsed by the renderer (`parse_response`) into an OpenAI assistant
    message (`to_openai_message`): its content, and its tool calls when it made any."""
    parse = _renderer_method(renderer, "parse_response")
    to_openai = _renderer_method(renderer, "to_openai_message")
    message, _ = parse(_ids(completion_tokens, "completion_tokens"))
    parsed: dict[str, Any] = to_openai(message)
    return parsed


def history_to_datum(
    history: History, advantage: float, renderer: Any, tokenizer: Any
) -> types.Datum | None:
    """The Datum that trains the history's last Choice with `advantage`: its sampled ids and
    logprobs (`extract_logprobs_from_choice`) after the prompt the renderer builds from the
    messages before it (`build_generation_prompt`, tools declared as
    `convert_openai_messages_to_renderer_format` does). None when the history has no Choice,
    or its Choice no logprobs."""
    build_prompt = _renderer_method(renderer, "build_generation_prompt")
    found = find_last_choice(history.messages_and_choices)
    if found is None:
        return None
    index, choice = found
    completion, logprobs = extract_logprobs_from_choice(choice, tokenizer)
    if not completion or len(completion) != len(logprobs):
        return None
    prompt_messages = [dict(as_message(item)) for item in history.messages_and_choices[:index]]
    tools = [dict(tool) for tool in history.tools] if history.tools is not None else None
    rendered = build_prompt(
        convert_openai_messages_to_renderer_format(prompt_messages, tools, renderer)
    )
    return build_datum(list(rendered.to_ints()), completion, logprobs, advantage)


def _renderer_method(renderer: object, name: str) -> Callable[..., Any]:
    method: Callable[..., Any] | None = getattr(renderer, name, None)
    if not callable(method):
        raise InvalidInputError(
            f"renderer must be a tinker-cookbook renderer, got {type(renderer).__name__} "
            f"(it has no {name})"
        )
    return method


def _tool_call(call: Mapping[str, Any]) -> Any:
    function = call.get("function", {})
    arguments = function.get("arguments", "{}")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments)
    tool_call = _cookbook_tool_call()
    return tool_call(
        id=call.get("id", ""),
        function=tool_call.FunctionBody(name=function.get("name", ""), arguments=arguments),
    )


def _cookbook_tool_call() -> Any:
    """tinker-cookbook's ToolCall: the renderers read an assistant's tool calls as these."""
    try:
        return importlib.import_module("tinker_cookbook.renderers").ToolCall
    except ImportError as error:
        raise ImportError(
            "tinker_cookbook is not installed: an assistant's tool calls become its ToolCall, "
            "the type its renderers read (pip install tinker-cookbook, your renderer's package)"
        ) from error


def _ids(tokens: Sequence[int], what: str) -> list[int]:
    ids = list(tokens)
    for token in ids:
        if isinstance(token, bool) or not isinstance(token, int | np.integer) or token < 0:
            raise InvalidInputError(f"{what} must be token ids (integers >= 0), got {token!r}")
    return [int(token) for token in ids]
