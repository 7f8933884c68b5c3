"""The weather agents' script: what the tiny model is taught to answer, turn by turn.

One script for every test that drives an agent (the plain openai SDK one and the LangGraph
one), so the tiny model is taught once per test session.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.e2e._scripted_model import Turn

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
WEATHER = {"Paris": "sunny, 21C", "Oslo": "sunny, 14C"}
SYSTEM = {"role": "system", "content": "You check the weather with the tool."}
QUESTION = {"role": "user", "content": "Is it sunny in Paris and Oslo?"}
SUMMARY = {"role": "user", "content": "Paris: sunny. Oslo: sunny."}
FINAL = "Both are sunny."


def _call(city: str) -> str:
    return f'<tool_call>{{"name": "get_weather", "arguments": {{"city": "{city}"}}}}</tool_call>'


def _assistant(city: str) -> dict[str, Any]:
    arguments = json.dumps({"city": city})
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}
    ]}  # fmt: skip


def _tool(city: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": "c", "content": WEATHER[city]}


AGENT_SCRIPT: list[Turn] = [
    ([SYSTEM, QUESTION], TOOLS, _call("Paris")),
    ([SYSTEM, QUESTION, _assistant("Paris"), _tool("Paris")], TOOLS, _call("Oslo")),
    (
        [SYSTEM, QUESTION, _assistant("Paris"), _tool("Paris"), _assistant("Oslo"), _tool("Oslo")],
        TOOLS,
        FINAL,
    ),
    ([SYSTEM, QUESTION, SUMMARY], TOOLS, FINAL),
]


# What langchain-openai sends for a `@tool def get_weather(city: str)` with that docstring.
GRAPH_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
                "type": "object",
            },
        },
    }
]
GRAPH_QUESTION = {"role": "user", "content": "Is it sunny in Paris?"}
GRAPH_FINAL = "It is sunny in Paris."

SCRIPT: list[Turn] = [
    *AGENT_SCRIPT,
    ([GRAPH_QUESTION], GRAPH_TOOLS, _call("Paris")),
    ([GRAPH_QUESTION, _assistant("Paris"), _tool("Paris")], GRAPH_TOOLS, GRAPH_FINAL),
]


def local_model(base_model: str, root: Path, name: str) -> tuple[Any, Any]:
    """A LocalBackend and a TrainableModel on it (register it), storing under `root`."""
    import arthex
    from arthex.adapters.local import LocalBackend

    backend = LocalBackend(str(root))
    model = arthex.TrainableModel(
        name=name, project="capture", base_model=base_model, base_path=str(root),
        report_metrics=[],
    )  # fmt: skip
    return backend, model
