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

from datetime import UTC, datetime
from typing import Any

from openai.types.chat import ChatCompletion
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# ART dumps a computed `model` field with each exchange in some paths (not in parquet); it is
# derived from the request, so it is dropped on read rather than refused.
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

    def __bool__(self) -> bool:
        return bool(self.chat_completions or self.completions or self.responses or self.messages)

    def __len__(self) -> int:
        return (
            len(self.chat_completions)
            + len(self.completions)
            + len(self.responses)
            + len(self.messages)
        )
