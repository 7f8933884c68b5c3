"""The JSON shapes of the Tinker OpenAI-compatible server's own routes (ART 0.5.23's names and
fields): the model list, the body of `PUT /v1/models/{name}`, and scoring existing messages
and choices (`POST /v1/messages_and_choices/with_logprobs`). The chat completion itself is
arthex's OpenAI wire (`adapters.inference.chat_wire`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeAlias, cast

from openai.types import Model
from openai.types.chat.chat_completion import Choice
from openai.types.completion_usage import CompletionUsage
from pydantic import BaseModel, Field, PlainValidator, TypeAdapter

from ...core.chat_types import Message, Tools

_MESSAGE: TypeAdapter[Message] = TypeAdapter(Message)

__all__ = [
    "MessagesAndChoicesWithLogprobs",
    "MessagesAndChoicesWithLogprobsArgs",
    "ModelList",
    "ModelUpsert",
    "WireMessageOrChoice",
    "WireMessagesAndChoices",
    "message_or_choice",
]


def message_or_choice(value: object) -> Choice | Message:
    """A Choice (validated), or a message kept as the dict it came as once it validates as one
    of OpenAI's message types: pydantic turns the iterable fields of those TypedDicts (content
    parts, tool calls, even a string content) into one-shot iterators, so the validated copy
    is not what the caller sent."""
    if isinstance(value, Choice):
        return value
    if not isinstance(value, dict):
        raise ValueError(f"expected a message or a Choice, got {type(value).__name__}")
    if "role" not in value and "message" in value:
        return Choice.model_validate(value)
    _MESSAGE.validate_python(value)
    return cast(Message, dict(value))


WireMessageOrChoice: TypeAlias = Annotated[Choice | Message, PlainValidator(message_or_choice)]
WireMessagesAndChoices: TypeAlias = list[WireMessageOrChoice]


class ModelList(BaseModel):
    """`GET /v1/models`: the caller's aliases."""

    object: Literal["list"] = "list"
    data: list[Model]


class ModelUpsert(BaseModel):
    """`PUT /v1/models/{name}`: the `tinker://` sampler path (or base model) `name` serves."""

    target: str = Field(min_length=1)


class MessagesAndChoicesWithLogprobsArgs(BaseModel):
    """What to score: a conversation, and the models (aliases, paths or base models) to score
    its choices' tokens with; `model_aliases` renames a model in the answer's keys."""

    messages_and_choices: WireMessagesAndChoices
    models: list[str]
    model_aliases: dict[str, str] = Field(default_factory=dict)
    tools: Tools | None = None


class MessagesAndChoicesWithLogprobs(BaseModel):
    """The conversation back, each choice's token logprob entries carrying
    `extra_logprobs[{model or its alias}]`, and one usage per model."""

    messages_and_choices: WireMessagesAndChoices
    usages: list[CompletionUsage]


def as_json(item: Choice | Message) -> dict[str, Any]:
    if isinstance(item, Choice):
        return item.model_dump(mode="json")
    return dict(item)
