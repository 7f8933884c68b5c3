"""arthex's own rules for MCP scenarios, where they are stricter than ART's (the shared
behaviour is checked against ART's code in tests/interop/test_art_mcp.py), and
`generate_scenarios`' answers checked against a scripted generator on loopback."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from arthex.art.mcp import GeneratedScenario, GeneratedScenarioCollection, generate_scenarios
from arthex.core.errors import InvalidInputError
from arthex.environments.mcp_scenarios import ScenarioGenerationError
from tests.e2e._chat_server import ScriptedChatServer

pytestmark = pytest.mark.e2e

TASKS = [{"task": f"task {i}", "difficulty": 1 + i % 5} for i in range(7)]


def test_a_difficulty_is_an_integer_not_a_truth_value() -> None:
    with pytest.raises(InvalidInputError, match="between 1 and 5, not True"):
        GeneratedScenario(task="t", difficulty=True)  # ART takes True as 1
    with pytest.raises(InvalidInputError, match="a scenario's task is text, not int"):
        GeneratedScenario(task=3, difficulty=1)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="a scenario needs difficulty"):
        GeneratedScenario.from_dict({"task": "t"})
    with pytest.raises(InvalidInputError, match="a scenario is an object, not str"):
        GeneratedScenario.from_dict("task difficulty")  # type: ignore[arg-type]


def test_split_and_shuffle() -> None:
    collection = GeneratedScenarioCollection.from_dicts(TASKS)
    with pytest.raises(InvalidInputError, match=r"train_size \(-1\) must be between 0 and"):
        collection.split(-1)  # ART slices from the end
    train, val = collection.split(7)
    assert (len(train), len(val)) == (7, 0)
    once, again = collection.shuffle(seed=3), collection.shuffle(seed=3)
    assert once.to_dicts() == again.to_dicts()
    assert sorted(once.to_dicts(), key=lambda s: s["task"]) == TASKS  # a permutation
    assert collection.to_dicts() == TASKS  # the collection itself keeps its order
    assert collection[1:3] == [GeneratedScenario("task 1", 2), GeneratedScenario("task 2", 3)]


@pytest.fixture
def generator() -> Iterator[ScriptedChatServer]:
    answers: list[Any] = []
    server = ScriptedChatServer(lambda request: answers.pop(0))
    server.answers = answers  # type: ignore[attr-defined]
    server.thread.start()
    yield server
    server.httpd.shutdown()
    server.httpd.server_close()


def generate(server: ScriptedChatServer, count: int, **options: Any) -> Any:
    settings: dict[str, Any] = {
        "generator_model": "scripted", "generator_api_key": "k",
        "generator_base_url": server.base_url, "show_preview": False,
    }  # fmt: skip
    settings.update(options)
    return asyncio.run(generate_scenarios([{"name": "search"}], num_scenarios=count, **settings))


def test_a_bad_call_is_refused_before_the_generator_is_asked(
    generator: ScriptedChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENROUTER_API_KEY", raising=False)
    with pytest.raises(InvalidInputError, match="generator_api_key= or the OPENROUTER_API_KEY"):
        generate(generator, 2, generator_api_key=None)
    with pytest.raises(InvalidInputError, match="num_scenarios must be a positive integer, not 0"):
        generate(generator, 0)
    with pytest.raises(InvalidInputError, match="at least one tool or resource"):
        asyncio.run(generate_scenarios([], generator_api_key="k"))
    with pytest.raises(InvalidInputError, match="expected MCPTool objects or dicts, got str"):
        asyncio.run(generate_scenarios(["search"], generator_api_key="k"))  # type: ignore[arg-type]
    assert generator.requests == []


def test_the_generators_answer_is_checked(generator: ScriptedChatServer) -> None:
    answers = generator.answers  # type: ignore[attr-defined]
    answers.extend([
        "three scenarios, as asked",
        json.dumps({"scenarios": {"task": "t", "difficulty": 1}}),
        json.dumps({"scenarios": [{"task": "t", "difficulty": 7}, *TASKS[:1]]}),
        json.dumps({"scenarios": TASKS[:2]}),
    ])  # fmt: skip
    with pytest.raises(ScenarioGenerationError, match="answered text that is not JSON"):
        generate(generator, 2)
    with pytest.raises(ScenarioGenerationError, match="answered no list of scenarios"):
        generate(generator, 2)
    with pytest.raises(ScenarioGenerationError, match="a scenario that is not one: Difficulty"):
        generate(generator, 2)
    assert generate(generator, 2).to_dicts() == TASKS[:2]
    schema = generator.requests[-1]["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["scenarios"]["minItems"] == 2
    assert schema["properties"]["scenarios"]["maxItems"] == 2
