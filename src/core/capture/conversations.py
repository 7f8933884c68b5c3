"""The conversations of a trajectory as plain chat messages: what a judge (or a person) reads.

A hand-built trajectory has its main conversation and its additional histories. A captured one
is rebuilt from its calls: each call's request messages plus the reply form a conversation,
and a later call whose request repeats an earlier conversation (message by message, compared
by role, text, tool calls and tool-call id) continues it. Calls that continue nothing (a
sub-agent, a rewritten history) start conversations of their own, in the order they started.

`trainable` marks the model's own sampled turns, the ones training learns from: the Choices of
a hand-built trajectory, and in a captured one each call's reply, wherever the conversation
carries it (a later call re-sends it as history); assistant messages the agent wrote itself
(few-shot examples) are not marked.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, cast

import attrs
from openai.types.chat.chat_completion import Choice

from ..trajectories import Trajectory


@attrs.frozen
class Conversation:
    messages: tuple[dict[str, Any], ...]
    tools: tuple[dict[str, Any], ...] | None = None
    trainable: frozenset[int] = frozenset()  # indices of the model's sampled turns


def conversations(trajectory: Trajectory) -> list[Conversation]:
    """The main conversation first, then the others (additional histories, other threads)."""
    if not trajectory.exchanges:
        main = tuple(cast("dict[str, Any]", message) for message in trajectory.messages())
        found = [
            Conversation(main, _tools(trajectory.tools), _choices(trajectory.messages_and_choices))
        ]
        for history in trajectory.additional_histories:
            found.append(
                Conversation(
                    tuple(_message(item) for item in history.messages_and_choices),
                    _tools(history.tools),
                    _choices(history.messages_and_choices),
                )
            )
        return found
    threads: list[tuple[list[dict[str, Any]], list[tuple[Any, ...]], Any]] = []
    ordered = sorted(
        enumerate(trajectory.exchanges.chat_completions),
        key=lambda item: (item[1].start_time, item[0]),
    )
    replies: set[tuple[Any, ...]] = set()
    for _, exchange in ordered:
        sent = exchange.request.get("messages")
        listed = sent if isinstance(sent, list) else []
        messages = [dict(m) for m in listed if isinstance(m, Mapping)]
        if exchange.response.choices:
            messages.append(assistant_message(exchange.response.choices[0]))
            replies.add(_key(messages[-1]))
        keys = [_key(m) for m in messages]
        tools = exchange.request.get("tools")
        for index, (_, known, _) in enumerate(threads):
            if len(known) < len(keys) and keys[: len(known)] == known:
                threads[index] = (messages, keys, tools)
                break
        else:
            threads.append((messages, keys, tools))
    return [
        Conversation(
            tuple(messages),
            _tools(tools),
            frozenset(i for i, key in enumerate(keys) if key in replies),
        )
        for messages, keys, tools in threads
    ]


def _choices(items: Sequence[Any]) -> frozenset[int]:
    return frozenset(i for i, item in enumerate(items) if isinstance(item, Choice))


def assistant_message(choice: Choice) -> dict[str, Any]:
    """A reply as the assistant message an agent appends to its history."""
    message: dict[str, Any] = {"role": "assistant", "content": choice.message.content}
    if choice.message.tool_calls:
        message["tool_calls"] = [call.model_dump(mode="json") for call in choice.message.tool_calls]
    return message


def _message(item: Any) -> dict[str, Any]:
    if isinstance(item, Choice):
        return assistant_message(item)
    return dict(item)


def _tools(tools: object) -> tuple[dict[str, Any], ...] | None:
    if isinstance(tools, Sequence) and not isinstance(tools, str):
        return tuple(dict(tool) for tool in tools if isinstance(tool, Mapping))
    return None


def _key(message: Mapping[str, Any]) -> tuple[Any, ...]:
    """What identifies a message across an agent's re-sends: clients add `null` fields,
    spell a missing content as "" or None, and reorder nothing else that matters."""
    calls = []
    for call in message.get("tool_calls") or []:
        if isinstance(call, Mapping):
            inner = call.get("function")
            function: Mapping[str, Any] = inner if isinstance(inner, Mapping) else call
            arguments = function.get("arguments")
            if not isinstance(arguments, str):
                arguments = json.dumps(arguments, sort_keys=True)
            calls.append((call.get("id"), function.get("name"), arguments))
    content = message.get("content")
    if not isinstance(content, str):
        content = json.dumps(content, sort_keys=True) if content else ""
    return (message.get("role"), content, tuple(calls), message.get("tool_call_id"))
