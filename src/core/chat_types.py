"""The chat types ART scripts annotate with (`art.Messages`, `art.MessagesAndChoices`,
`art.Tools`): the OpenAI SDK's request types, so a `Messages` list passes straight to
`client.chat.completions.create(messages=...)` under a type checker."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, TypeAlias, cast

from openai.types.chat.chat_completion import Choice
from openai.types.chat.chat_completion_message_param import ChatCompletionMessageParam
from openai.types.chat.chat_completion_tool_param import ChatCompletionToolParam

Message: TypeAlias = ChatCompletionMessageParam
Messages: TypeAlias = list[ChatCompletionMessageParam]
MessageOrChoice: TypeAlias = ChatCompletionMessageParam | Choice
MessagesAndChoices: TypeAlias = list[ChatCompletionMessageParam | Choice]
Tools: TypeAlias = list[ChatCompletionToolParam]


def as_message(item: MessageOrChoice | dict[str, Any]) -> Message:
    """One item of a conversation as a plain chat message, the one way arthex spells it: a
    Choice becomes the assistant message an agent appends (its tool calls as JSON), and a
    missing content is "" (ART's rule), so scripts, judges, viewers and SFT read one shape."""
    if isinstance(item, Choice):
        message: dict[str, Any] = {"role": "assistant", "content": item.message.content or ""}
        if item.message.tool_calls:
            message["tool_calls"] = [
                call.model_dump(mode="json") for call in item.message.tool_calls
            ]
        return cast(Message, message)
    copy = dict(item)
    if copy.get("content") is None:
        copy["content"] = ""
    return cast(Message, copy)


def content_text(content: object, separator: str = "\n") -> str:
    """A message's content as plain text: a string as it is, the text of each part of a
    list (`<image_url>` and the like for parts without text), "" for none, JSON otherwise."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return separator.join(
            str(part.get("text", f"<{part.get('type', 'part')}>"))
            for part in content
            if isinstance(part, Mapping)
        )
    return json.dumps(content, ensure_ascii=False, default=str)


__all__ = [
    "Message",
    "MessageOrChoice",
    "Messages",
    "MessagesAndChoices",
    "Tools",
    "as_message",
    "content_text",
]
