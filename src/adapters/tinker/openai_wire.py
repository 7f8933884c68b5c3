"""The JSON shapes of the Tinker OpenAI-compatible server's own routes (ART 0.5.23's names and
fields): the model list, the body of `PUT /v1/models/{name}`, and scoring existing messages
and choices (`POST /v1/messages_and_choices/with_logprobs`). The chat completion itself is
arthex's OpenAI wire (`adapters.inference.chat_wire`)."""

from __future__ import annotations

from typing import Any, Literal, TypeAlias, cast

from openai.types import Model
from openai.types.chat.chat_completion import Choice
from openai.types.completion_usage import CompletionUsage
from pydantic import BaseModel, Field

from ...core.chat_types import Message, Tools

__all__ = [
    "MessagesAndChoicesWithLogprobs",
    "MessagesAndChoicesWithLogprobsArgs",
    "ModelList",
    "ModelUpsert",
    "WireMessagesAndChoices",
]

WireMessagesAndChoices: TypeAlias = list[Choice | Message]


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


def items_of(raw: object, args: MessagesAndChoicesWithLogprobsArgs) -> list[Choice | Message]:
    """The conversation to answer with: each Choice as validated, each message as it came
    (validated too, but pydantic turns a message's string content into a one-shot iterator
    where the OpenAI types allow an iterable of parts, so the original dict is kept)."""
    sent = raw.get("messages_and_choices") if isinstance(raw, dict) else None
    if not isinstance(sent, list) or len(sent) != len(args.messages_and_choices):
        return list(args.messages_and_choices)
    return [
        item if isinstance(item, Choice) else cast(Message, original)
        for original, item in zip(sent, args.messages_and_choices, strict=True)
    ]


def as_json(item: Choice | Message) -> dict[str, Any]:
    if isinstance(item, Choice):
        return item.model_dump(mode="json")
    return dict(item)
