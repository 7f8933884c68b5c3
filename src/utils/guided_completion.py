"""Guiding a student model to a teacher's reply, under ART's names (`art.guided_completion`).

`get_guided_completion_params(teacher_completion, tools)` gives the request parameters that
make a student reproduce the teacher's first choice: for a tool call, `tool_choice` naming the
tool and that one tool with its parameters frozen to the teacher's arguments (each argument a
JSON schema `const`, which vLLM's guided decoding enforces); for text, `guided_choice` holding
the teacher's text. `freeze_tool_schema(tool, args)` is the freezing step on its own.

The frozen schema is the one ART's pydantic model emits (property titles, `required`, the
model title `{Name}FrozenArgs`), written here directly. One difference, deliberate: every
argument is frozen; ART's model drops an argument whose name starts with "_" and fails on
names pydantic reserves (`model_config`), so the student would not be held to it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from typing import Any

from openai.types.chat import (
    ChatCompletion,
    ChatCompletionToolChoiceOptionParam,
    ChatCompletionToolParam,
)
from openai.types.chat.chat_completion_message_function_tool_call import (
    ChatCompletionMessageFunctionToolCall,
)

from ..core.errors import InvalidInputError

__all__ = ["freeze_tool_schema", "get_guided_completion_params"]

GuidedParams = tuple[
    list[str | None] | None,
    ChatCompletionToolChoiceOptionParam | None,
    list[ChatCompletionToolParam] | None,
]


def _json_type(value: object) -> str | None:
    """The JSON schema type of a JSON value (an object's is left out, as ART's schema does)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return None
    raise InvalidInputError(f"a frozen argument must be a JSON value, got {type(value).__name__}")


def _title(name: str) -> str:
    return name.title().replace("_", " ").strip()


def _tool_name(tool: Mapping[str, Any]) -> str:
    function = tool.get("function")
    name = function.get("name") if isinstance(function, Mapping) else None
    if not isinstance(name, str) or not name:
        raise InvalidInputError(f"a tool must be {{'function': {{'name': ...}}}}, got {tool!r}")
    return name


def freeze_tool_schema(
    tool: ChatCompletionToolParam, fixed_args: dict[str, object]
) -> ChatCompletionToolParam:
    """A copy of `tool` whose parameters accept only `fixed_args`: each argument's one value."""
    name = _tool_name(tool)
    properties: dict[str, Any] = {}
    for key, value in fixed_args.items():
        kind = _json_type(value)
        properties[key] = {"const": value, "title": _title(key)}
        if kind is not None:
            properties[key]["type"] = kind
    schema: dict[str, Any] = {"properties": properties}
    if properties:
        schema["required"] = list(properties)
    schema |= {"title": f"{name.title()}FrozenArgs", "type": "object"}
    frozen = copy.deepcopy(tool)
    frozen["function"]["parameters"] = schema
    return frozen


def get_guided_completion_params(
    completion: ChatCompletion,
    base_tools: Iterable[ChatCompletionToolParam] | None = None,
) -> GuidedParams:
    """(guided_choice, tool_choice, tools) that steer a student to `completion`'s first
    choice: a tool call's tool, frozen to its arguments, or its text."""
    if not completion.choices:
        raise InvalidInputError("the teacher's completion has no choice to guide towards")
    message = completion.choices[0].message
    if not message.tool_calls:
        return [message.content], None, None
    call = message.tool_calls[0]
    if not isinstance(call, ChatCompletionMessageFunctionToolCall):
        raise InvalidInputError(f"only function tool calls can be guided, got {call.type!r}")
    if base_tools is None:
        raise InvalidInputError("the teacher called a tool: pass base_tools, the tools it had")
    name = call.function.name
    chosen = next((tool for tool in base_tools if _tool_name(tool) == name), None)
    if chosen is None:
        raise InvalidInputError(f"the teacher called {name!r}, which is not in base_tools")
    try:
        arguments = json.loads(call.function.arguments)
    except json.JSONDecodeError as error:
        raise InvalidInputError(
            f"the teacher's arguments to {name!r} are not JSON: {call.function.arguments!r}"
        ) from error
    if not isinstance(arguments, dict):
        raise InvalidInputError(f"the teacher's arguments to {name!r} are not a JSON object")
    tool_choice: ChatCompletionToolChoiceOptionParam = {
        "type": "function",
        "function": {"name": name},
    }
    return None, tool_choice, [freeze_tool_schema(chosen, arguments)]
