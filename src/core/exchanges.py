"""Recorded model calls: what a captured trajectory holds instead of messages and Choices.

The shape is ART's `exchanges` representation, so ART reads arthex's captured runs and arthex
reads ART's: per API, a list of `{start_time, end_time, request, response}` records, where
`request` is the JSON body the client sent and `response` the parsed reply.

arthex records and trains chat completions only. The other three lists (`completions`,
`responses`, `messages`) are kept exactly as read, as plain JSON objects, so an ART run that
used them survives a read and a write unchanged; training a trajectory that holds only those
is refused with a message that says so (see `core.capture.samples`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from openai.types.chat import ChatCompletion
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    computed_field,
    field_validator,
    model_validator,
)

from .chat_types import as_message

# ART dumps a computed `model` field with each exchange (its parquet writer leaves it out); it
# is derived from the request, so it is written in a dump as ART does and dropped on read.
_COMPUTED = "model"


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class ChatCompletionsExchange(BaseModel):
    """One chat-completion call: the request body as sent and the response as received.

    The response keeps every field the server returned, extras included: arthex's server
    (like vLLM with `return_token_ids`) adds `prompt_token_ids` to the response or to each
    choice and `token_ids` to each choice; those are what training uses."""

    model_config = ConfigDict(extra="forbid")

    start_time: datetime
    end_time: datetime
    request: dict[str, Any]
    response: ChatCompletion

    @model_validator(mode="before")
    @classmethod
    def _drop_computed(cls, data: Any) -> Any:
        if isinstance(data, dict) and _COMPUTED in data:
            data = {key: value for key, value in data.items() if key != _COMPUTED}
        return data

    @field_validator("start_time", "end_time")
    @classmethod
    def _as_utc(cls, value: datetime) -> datetime:
        return _utc(value)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def model(self) -> str | None:
        """The model the request named (the served name, e.g. `agent@3`)."""
        requested = self.request.get("model")
        return requested if isinstance(requested, str) else self.response.model


class TrajectoryExchanges(BaseModel):
    """Every recorded call of one trajectory, per API, in the order they completed."""

    model_config = ConfigDict(extra="forbid")

    chat_completions: list[ChatCompletionsExchange] = Field(default_factory=list)
    completions: list[dict[str, Any]] = Field(default_factory=list)
    responses: list[dict[str, Any]] = Field(default_factory=list)
    messages: list[dict[str, Any]] = Field(default_factory=list)

    @field_validator("completions", "responses", "messages", mode="before")
    @classmethod
    def _records_as_json(cls, records: Any) -> Any:
        """A typed record (a pydantic model) is kept as its JSON dump, without the derived
        `model` name, as a record read from a file is."""
        if not isinstance(records, list):
            return records
        return [
            record.model_dump(mode="json", exclude_computed_fields=True)
            if isinstance(record, BaseModel)
            else record
            for record in records
        ]

    def __bool__(self) -> bool:
        return bool(self.chat_completions or self.completions or self.responses or self.messages)

    def __len__(self) -> int:
        return (
            len(self.chat_completions)
            + len(self.completions)
            + len(self.responses)
            + len(self.messages)
        )

    def threads(self) -> list[tuple[list[dict[str, Any]], Any, frozenset[int]]]:
        """The conversations the chat completions hold, as (messages, the request's tools, the
        indices of the model's own replies): each call's request messages plus its reply form
        a conversation, and a later call whose request repeats an earlier conversation
        (message by message, compared by role, text, tool calls and tool-call id) continues
        it. Calls that continue nothing (a sub-agent, a rewritten history) start their own, in
        the order they started. A reply is the model's wherever a conversation carries it (a
        later call re-sends it as history); assistant messages the agent wrote itself (few-shot
        examples) are not."""
        threads: list[tuple[list[dict[str, Any]], list[tuple[Any, ...]], Any]] = []
        ordered = sorted(
            enumerate(self.chat_completions),
            key=lambda item: (item[1].start_time, item[0]),
        )
        replies: set[tuple[Any, ...]] = set()
        for _, exchange in ordered:
            sent = exchange.request.get("messages")
            listed = sent if isinstance(sent, list) else []
            messages = [dict(as_message(dict(m))) for m in listed if isinstance(m, Mapping)]
            if exchange.response.choices:
                messages.append(dict(as_message(exchange.response.choices[0])))
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
            (messages, tools, frozenset(i for i, key in enumerate(keys) if key in replies))
            for messages, keys, tools in threads
        ]


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


class SequenceHistory(BaseModel):
    """ART's `art.trajectories.History`: the base of its per-protocol histories (one
    tokenizable sequence each), whose one field is the served name of the model that sampled
    it (None: any). arthex keeps those calls as `Trajectory.exchanges` above, and a
    trajectory's extra conversations in `History` (ART's `LegacyHistory`, not this class in
    ART either); this base lets ART code that subclasses it, checks `isinstance` against it or
    builds one with `model=` run with ART's fields and validation."""

    model_config = ConfigDict(extra="forbid")

    model: str | None
