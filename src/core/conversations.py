"""Conversations to fine-tune on: OpenAI chat messages (the fine-tuning format), checked.

`conversation_from` takes a Trajectory (its Choices become assistant messages; its
`additional_histories` are other conversations and are not included), an OpenAI fine-tuning
record (`{"messages": [...], "tools": [...]}`) or a plain list of messages, and
refuses anything else with an InvalidInputError that names where it is (the caller passes
"item 3" or "data.jsonl line 7"). Assistant messages may carry the format's `weight` (0 or
1): weight 0 makes the reply context only. Only text content is accepted: fine-tuning trains
text models here.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import attrs

from .errors import InvalidInputError
from .trajectories import Trajectory, TrajectoryGroup

AssistantTurns = Literal["all", "last"]
ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
CONVERSATION_KEYS = frozenset({"messages", "tools", "parallel_tool_calls"})


@attrs.frozen(eq=False)
class Conversation:
    """One chat to fine-tune on: messages (OpenAI chat format, without `weight`), the tool
    specs the template renders, and the assistant messages that are context only (weight 0)."""

    messages: tuple[dict[str, Any], ...]
    tools: tuple[dict[str, Any], ...] | None = None
    untrained: frozenset[int] = frozenset()

    def trained_turns(self, assistant_turns: AssistantTurns = "all") -> list[int]:
        """Indices of the assistant messages whose tokens are targets."""
        turns = [
            index
            for index, message in enumerate(self.messages)
            if message["role"] == "assistant" and index not in self.untrained
        ]
        return turns[-1:] if assistant_turns == "last" else turns

    def to_json(self) -> dict[str, Any]:
        """The OpenAI fine-tuning format (`weight: 0` on context-only assistant messages)."""
        messages = [
            {**message, "weight": 0} if index in self.untrained else dict(message)
            for index, message in enumerate(self.messages)
        ]
        data: dict[str, Any] = {"messages": messages}
        if self.tools is not None:
            data["tools"] = [dict(tool) for tool in self.tools]
        return data


def conversation_from(item: object, where: str = "conversation") -> Conversation:
    """A Conversation from a Trajectory, an OpenAI fine-tuning record (`{"messages": [...],
    "tools": [...]}`) or a list of messages; InvalidInputError naming `where` otherwise."""
    if isinstance(item, Conversation):
        return item
    tools: object = None
    if isinstance(item, Trajectory):
        messages: object = item.messages()
        tools = item.tools
    elif isinstance(item, Mapping):
        unknown = sorted(str(key) for key in item if key not in CONVERSATION_KEYS)
        if unknown:
            raise InvalidInputError(
                f"{where}: unknown key(s) {unknown}; a record holds 'messages' and optionally "
                "'tools' (the OpenAI fine-tuning format)"
            )
        if "messages" not in item:
            raise InvalidInputError(f"{where}: the record has no 'messages'")
        messages, tools = item["messages"], item.get("tools")
    elif isinstance(item, list | tuple):
        messages = item
    else:
        raise InvalidInputError(
            f"{where}: expected a Trajectory, a {{'messages': [...]}} record or a list of "
            f"messages, got {type(item).__name__}"
        )
    return _checked(messages, tools, where)


def _checked(messages: object, tools: object, where: str) -> Conversation:
    if not isinstance(messages, list | tuple) or not messages:
        raise InvalidInputError(f"{where}: 'messages' must be a non-empty list of chat messages")
    clean: list[dict[str, Any]] = []
    untrained: set[int] = set()
    for index, message in enumerate(messages):
        here = f"{where}, message {index}"
        if not isinstance(message, Mapping):
            raise InvalidInputError(f"{here}: expected an object, got {type(message).__name__}")
        plain = copy.deepcopy(dict(message))
        role = plain.get("role")
        if role not in ROLES:
            raise InvalidInputError(f"{here}: role {role!r} is not one of {sorted(ROLES)}")
        weight = plain.pop("weight", None)
        if weight is not None:
            if role != "assistant" or isinstance(weight, bool) or weight not in (0, 1):
                raise InvalidInputError(
                    f"{here}: 'weight' must be 0 or 1 and only on assistant messages, got "
                    f"{weight!r} on a {role} message"
                )
            if weight == 0:
                untrained.add(index)
        _check_content(plain, here)
        if role == "assistant":
            _check_tool_calls(plain, here)
        clean.append(plain)
    if clean[0]["role"] == "assistant" and 0 not in untrained:
        raise InvalidInputError(
            f"{where}: message 0 is an assistant message to train on, but nothing comes before "
            "it; put its prompt (a user or system message) first, or give it weight 0"
        )
    if not any(m["role"] == "assistant" and i not in untrained for i, m in enumerate(clean)):
        raise InvalidInputError(
            f"{where}: no assistant message to train on (SFT learns the assistant's replies; "
            "messages with weight 0 are context only)"
        )
    return Conversation(tuple(clean), _checked_tools(tools, where), frozenset(untrained))


def _check_content(message: dict[str, Any], here: str) -> None:
    content = message.get("content")
    if content is None:
        if message["role"] == "assistant" and message.get("tool_calls"):
            return
        raise InvalidInputError(
            f"{here}: 'content' is missing (a {message['role']} message needs it)"
        )
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        raise InvalidInputError(
            f"{here}: 'content' must be a string or a list of text parts, got "
            f"{type(content).__name__}"
        )
    for number, part in enumerate(content):
        if (
            not isinstance(part, Mapping)
            or part.get("type") != "text"
            or not isinstance(part.get("text"), str)
        ):
            kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
            raise InvalidInputError(
                f"{here}: content part {number} is {kind!r}; fine-tuning takes text parts "
                "({'type': 'text', 'text': ...}) only"
            )


def _check_tool_calls(message: dict[str, Any], here: str) -> None:
    calls = message.get("tool_calls")
    if calls is None:
        return
    if not isinstance(calls, list):
        raise InvalidInputError(f"{here}: 'tool_calls' must be a list")
    for number, call in enumerate(calls):
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
            raise InvalidInputError(
                f"{here}: tool call {number} needs a 'function' with a 'name' (OpenAI's "
                "{'type': 'function', 'function': {'name': ..., 'arguments': ...}})"
            )
        if not isinstance(function.get("arguments"), str | Mapping):
            raise InvalidInputError(
                f"{here}: tool call {number} ({function['name']!r}) needs 'arguments' as a JSON "
                "string or an object"
            )


def _checked_tools(tools: object, where: str) -> tuple[dict[str, Any], ...] | None:
    if tools is None:
        return None
    if not isinstance(tools, list | tuple) or not all(isinstance(t, Mapping) for t in tools):
        raise InvalidInputError(f"{where}: 'tools' must be a list of tool specs (objects)")
    return tuple(copy.deepcopy(dict(tool)) for tool in tools)


def conversations_from(items: object) -> list[Conversation]:
    """What `train_sft` accepts: an iterable of Trajectory, fine-tuning records, message lists
    or Conversations (a TrajectoryGroup counts as its trajectories); at least one. Errors
    name the item."""
    if isinstance(items, TrajectoryGroup):
        items = items.trajectories
    if isinstance(items, str | bytes | Mapping | Trajectory) or not isinstance(items, Iterable):
        raise InvalidInputError(
            f"train_sft takes a list of trajectories or conversations, got {type(items).__name__}"
        )
    out: list[Conversation] = []
    for index, item in enumerate(items):
        if isinstance(item, TrajectoryGroup):
            where = f"item {index}, trajectory"
            out.extend(conversation_from(t, f"{where} {i}") for i, t in enumerate(item))
        else:
            out.append(conversation_from(item, f"item {index}"))
    if not out:
        raise InvalidInputError("train_sft got no conversations: there is nothing to train on")
    return out
