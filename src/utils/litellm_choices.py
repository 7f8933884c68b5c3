"""LiteLLM's non-streaming choice as the OpenAI SDK's `Choice`, with ART's name
(`art.utils.litellm.convert_litellm_choice_to_openai`), for a rollout that calls models through
`litellm.acompletion` and logs the choice in a trajectory.

LiteLLM is not imported: its choice is read by its attributes (`message`, `finish_reason`,
`index`, `logprobs`), so this works with whatever LiteLLM version the caller has.
"""

from __future__ import annotations

from typing import Any

from openai.types.chat.chat_completion import Choice

from ..core.errors import InvalidInputError

__all__ = ["convert_litellm_choice_to_openai"]


def _get(value: Any, name: str) -> Any:
    return value.get(name) if isinstance(value, dict) else getattr(value, name, None)


def convert_litellm_choice_to_openai(litellm_choice: Any) -> Choice:
    """The assistant message (content, function tool calls) and token logprobs of a LiteLLM
    choice as an OpenAI `Choice`. A streamed choice (a `delta`, no `message`), another role or
    a tool call that is not a named function is refused with InvalidInputError."""
    message = _get(litellm_choice, "message")
    if message is None:
        raise InvalidInputError("Only non-streaming choices are currently supported")
    if _get(message, "role") != "assistant":
        raise InvalidInputError("Only assistant messages are supported")
    calls = []
    for call in _get(message, "tool_calls") or []:
        function = _get(call, "function")
        if _get(call, "type") != "function" or _get(function, "name") is None:
            raise InvalidInputError("Only function tool calls with a name are supported")
        calls.append(
            {
                "id": _get(call, "id"),
                "type": "function",
                "function": {
                    "name": _get(function, "name"),
                    "arguments": _get(function, "arguments"),
                },
            }
        )
    logprobs = _get(litellm_choice, "logprobs")
    tokens = None
    if logprobs is not None:
        tokens = {
            "content": [
                {
                    "token": _get(entry, "token"),
                    "bytes": _get(entry, "bytes"),
                    "logprob": _get(entry, "logprob"),
                    "top_logprobs": [
                        {
                            "token": _get(top, "token"),
                            "logprob": _get(top, "logprob"),
                            "bytes": _get(top, "bytes"),
                        }
                        for top in _get(entry, "top_logprobs") or []
                    ],
                }
                for entry in _get(logprobs, "content") or []
            ]
        }
    return Choice.model_validate(
        {
            "message": {
                "role": "assistant",
                "content": _get(message, "content"),
                "tool_calls": calls or None,
            },
            "finish_reason": _get(litellm_choice, "finish_reason"),
            "index": _get(litellm_choice, "index"),
            "logprobs": tokens,
        }
    )
