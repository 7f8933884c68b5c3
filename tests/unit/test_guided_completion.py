"""`art.guided_completion` under arthex: the frozen schemas are written out by hand in the
form ART's pydantic model emits (a `const` per argument, its title, `required`, the model
title `{Name}FrozenArgs`), and the guided parameters are the teacher's tool or text."""

from __future__ import annotations

from typing import Any

import pytest
from openai.types.chat import ChatCompletion, ChatCompletionToolParam

from arthex.art.guided_completion import freeze_tool_schema, get_guided_completion_params
from arthex.core.errors import InvalidInputError

WEATHER: ChatCompletionToolParam = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
CLOCK: ChatCompletionToolParam = {"type": "function", "function": {"name": "now"}}


def teacher(content: str | None = None, *calls: tuple[str, str]) -> ChatCompletion:
    tool_calls = [
        {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": arguments}}
        for i, (name, arguments) in enumerate(calls)
    ]
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return ChatCompletion.model_validate(
        {
            "id": "t",
            "object": "chat.completion",
            "created": 0,
            "model": "teacher",
            "choices": [{"index": 0, "finish_reason": "stop", "message": message}],
        }
    )


def test_each_argument_is_frozen_to_its_one_value() -> None:
    args = {"city": "Oslo", "days": 3, "scale": 1.5, "metric": True, "note": None, "hours": [1, 2]}
    frozen = freeze_tool_schema(WEATHER, args)
    assert frozen["function"]["parameters"] == {
        "properties": {
            "city": {"const": "Oslo", "title": "City", "type": "string"},
            "days": {"const": 3, "title": "Days", "type": "integer"},
            "scale": {"const": 1.5, "title": "Scale", "type": "number"},
            "metric": {"const": True, "title": "Metric", "type": "boolean"},
            "note": {"const": None, "title": "Note", "type": "null"},
            "hours": {"const": [1, 2], "title": "Hours", "type": "array"},
        },
        "required": ["city", "days", "scale", "metric", "note", "hours"],
        "title": "Get_WeatherFrozenArgs",
        "type": "object",
    }
    assert frozen["function"]["description"] == "Weather in a city"
    assert WEATHER["function"]["parameters"]["properties"] == {"city": {"type": "string"}}


def test_no_argument_an_object_and_names_pydantic_would_lose() -> None:
    assert freeze_tool_schema(CLOCK, {})["function"]["parameters"] == {
        "properties": {},
        "title": "NowFrozenArgs",
        "type": "object",
    }
    kept = freeze_tool_schema(CLOCK, {"where": {"a": 1}, "_private": 1, "model_config": "x"})
    assert kept["function"]["parameters"]["properties"] == {
        "where": {"const": {"a": 1}, "title": "Where"},
        "_private": {"const": 1, "title": "Private", "type": "integer"},
        "model_config": {"const": "x", "title": "Model Config", "type": "string"},
    }


def test_a_tool_call_guides_to_the_tool_with_the_teachers_arguments() -> None:
    guided, choice, tools = get_guided_completion_params(
        teacher(None, ("get_weather", '{"city": "Oslo"}'), ("now", "{}")), [CLOCK, WEATHER]
    )
    assert guided is None
    assert choice == {"type": "function", "function": {"name": "get_weather"}}
    assert tools == [freeze_tool_schema(WEATHER, {"city": "Oslo"})]


def test_text_guides_to_the_teachers_text() -> None:
    assert get_guided_completion_params(teacher("Sunny.")) == (["Sunny."], None, None)


@pytest.mark.parametrize(
    ("completion", "tools", "message"),
    [
        (teacher(None, ("get_weather", "{}")), None, "pass base_tools"),
        (teacher(None, ("get_rain", "{}")), [WEATHER], "'get_rain', which is not in base_tools"),
        (teacher(None, ("get_weather", "{oops")), [WEATHER], "are not JSON"),
        (teacher(None, ("get_weather", "[1]")), [WEATHER], "are not a JSON object"),
    ],
    ids=["no-tools", "unknown-tool", "bad-json", "not-object"],
)
def test_what_cannot_be_guided_is_refused_in_one_line(
    completion: ChatCompletion, tools: list[ChatCompletionToolParam] | None, message: str
) -> None:
    with pytest.raises(InvalidInputError, match=message):
        get_guided_completion_params(completion, tools)


def test_a_value_that_is_not_json_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="must be a JSON value, got set"):
        freeze_tool_schema(WEATHER, {"city": {"Oslo"}})
