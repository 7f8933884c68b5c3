"""The chat types ART scripts annotate with (`art.Messages`, `art.MessagesAndChoices`,
`art.Tools`): the OpenAI SDK's request types, so a `Messages` list passes straight to
`client.chat.completions.create(messages=...)` under a type checker."""

from __future__ import annotations

from typing import TypeAlias

from openai.types.chat.chat_completion import Choice
from openai.types.chat.chat_completion_message_param import ChatCompletionMessageParam
from openai.types.chat.chat_completion_tool_param import ChatCompletionToolParam

Message: TypeAlias = ChatCompletionMessageParam
Messages: TypeAlias = list[ChatCompletionMessageParam]
MessageOrChoice: TypeAlias = ChatCompletionMessageParam | Choice
MessagesAndChoices: TypeAlias = list[ChatCompletionMessageParam | Choice]
Tools: TypeAlias = list[ChatCompletionToolParam]

__all__ = ["Message", "MessageOrChoice", "Messages", "MessagesAndChoices", "Tools"]
