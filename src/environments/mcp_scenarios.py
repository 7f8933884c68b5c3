"""Scenarios for an agent that uses an MCP server's tools: asked of a generator model, kept in
a collection that splits, filters and summarizes them.

```python
scenarios = await generate_scenarios(tools, resources, num_scenarios=24)
train, val = scenarios.shuffle(seed=0).split(20)
```

The generator is any OpenAI-compatible endpoint that follows a JSON schema in
`response_format` (OpenRouter by default, keyed by `OPENROUTER_API_KEY`). Its answer is
checked against what was asked (the count, each task's text and difficulty) before anything
is returned.
"""

from __future__ import annotations

import json
import os
import random
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

from ..core.errors import ArthexError, InvalidInputError

DEFAULT_GENERATOR_MODEL = "openai/gpt-4.1-mini"
DEFAULT_GENERATOR_BASE_URL = "https://openrouter.ai/api/v1"
MAX_DIFFICULTY = 5


class ScenarioGenerationError(ArthexError, ValueError):
    """The generator model's answer was not the scenarios asked for."""


@dataclass
class MCPTool:
    """A tool an MCP server offers: its name, what it does, its JSON-schema parameters."""

    name: str
    description: str
    parameters: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MCPTool:
        return cls(
            name=data.get("name", ""),
            description=data.get("description", ""),
            parameters=dict(data.get("parameters") or {}),
        )

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "parameters": self.parameters}

    def to_tool_schema(self) -> dict[str, Any]:
        """The tool as a chat-completions `tools` entry."""
        return {"type": "function", "function": self.to_dict()}


@dataclass
class MCPResource:
    """A resource an MCP server offers (`mimeType` on the wire, `mime_type` here)."""

    uri: str
    name: str
    description: str
    mime_type: str | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MCPResource:
        return cls(
            uri=data.get("uri", ""),
            name=data.get("name", ""),
            description=data.get("description", ""),
            mime_type=data.get("mimeType") or data.get("mime_type"),
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"uri": self.uri, "name": self.name, "description": self.description}
        if self.mime_type:
            out["mimeType"] = self.mime_type
        return out


complete_task_tool = MCPTool(
    name="complete_task",
    description="Complete a task",
    parameters={
        "type": "object",
        "properties": {"summary": {"type": "string", "description": "Summary of accomplishments"}},
        "required": ["summary"],
    },
)
"""The tool an agent calls to say it is done, with a summary of what it did."""


@dataclass
class GeneratedScenario:
    """One task for the agent, with its difficulty from 1 (one tool call) to 5."""

    task: str
    difficulty: int

    def __post_init__(self) -> None:
        if not isinstance(self.task, str):
            raise InvalidInputError(f"a scenario's task is text, not {type(self.task).__name__}")
        if (
            isinstance(self.difficulty, bool)
            or not isinstance(self.difficulty, int)
            or not 1 <= self.difficulty <= MAX_DIFFICULTY
        ):
            raise InvalidInputError(
                f"Difficulty must be an integer between 1 and {MAX_DIFFICULTY}, "
                f"not {self.difficulty!r}"
            )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GeneratedScenario:
        if not isinstance(data, Mapping):
            raise InvalidInputError(f"a scenario is an object, not {type(data).__name__}")
        missing = [key for key in ("task", "difficulty") if key not in data]
        if missing:
            raise InvalidInputError(f"a scenario needs {' and '.join(missing)}: {dict(data)!r}")
        return cls(task=data["task"], difficulty=data["difficulty"])

    def to_dict(self) -> dict[str, Any]:
        return {"task": self.task, "difficulty": self.difficulty}

    def preview(self, max_length: int = 120) -> str:
        """The task, cut to `max_length` characters with an ellipsis when longer."""
        if len(self.task) <= max_length:
            return self.task
        return self.task[:max_length].strip() + "…"


class GeneratedScenarioCollection:
    """Scenarios in order: JSON in and out, shuffle, split, filter by difficulty, summary."""

    def __init__(self, scenarios: Sequence[GeneratedScenario]) -> None:
        self.scenarios = list(scenarios)

    @classmethod
    def from_dicts(cls, data: Sequence[Mapping[str, Any]]) -> GeneratedScenarioCollection:
        return cls([GeneratedScenario.from_dict(item) for item in data])

    @classmethod
    def from_json(cls, text: str) -> GeneratedScenarioCollection:
        """From `{"scenarios": [...]}`, a bare list, or an object whose first value is the
        list (a generator that named the key otherwise)."""
        return cls.from_dicts(_scenario_list(json.loads(text)))

    def to_dicts(self) -> list[dict[str, Any]]:
        return [scenario.to_dict() for scenario in self.scenarios]

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps({"scenarios": self.to_dicts()}, indent=indent)

    def __len__(self) -> int:
        return len(self.scenarios)

    def __iter__(self) -> Iterator[GeneratedScenario]:
        return iter(self.scenarios)

    @overload
    def __getitem__(self, index: int) -> GeneratedScenario: ...

    @overload
    def __getitem__(self, index: slice) -> list[GeneratedScenario]: ...

    def __getitem__(self, index: int | slice) -> GeneratedScenario | list[GeneratedScenario]:
        return self.scenarios[index]

    def shuffle(self, seed: int | None = None) -> GeneratedScenarioCollection:
        """A new collection in random order (`seed`: the same order every time)."""
        shuffled = list(self.scenarios)
        (random.Random(seed) if seed is not None else random).shuffle(shuffled)
        return GeneratedScenarioCollection(shuffled)

    def split(
        self, train_size: int
    ) -> tuple[GeneratedScenarioCollection, GeneratedScenarioCollection]:
        """The first `train_size` scenarios and the rest."""
        if not 0 <= train_size <= len(self.scenarios):
            raise InvalidInputError(
                f"train_size ({train_size}) must be between 0 and the number of scenarios "
                f"({len(self.scenarios)})"
            )
        return (
            GeneratedScenarioCollection(self.scenarios[:train_size]),
            GeneratedScenarioCollection(self.scenarios[train_size:]),
        )

    def filter_by_difficulty(
        self, min_difficulty: int = 1, max_difficulty: int = MAX_DIFFICULTY
    ) -> GeneratedScenarioCollection:
        return GeneratedScenarioCollection(
            [s for s in self.scenarios if min_difficulty <= s.difficulty <= max_difficulty]
        )

    def get_difficulty_distribution(self) -> Counter[int]:
        return Counter(scenario.difficulty for scenario in self.scenarios)

    def preview(self, n: int = 5, max_task_length: int = 120) -> None:
        """Print the first `n` tasks (cut to `max_task_length`) with their difficulty."""
        for number, scenario in enumerate(self.scenarios[: max(n, 0)], start=1):
            print(
                f"   {number}. {scenario.preview(max_task_length)}  "
                f"(difficulty {scenario.difficulty}/{MAX_DIFFICULTY})"
            )

    def print_difficulty_distribution(self) -> None:
        """Print how many scenarios each difficulty has, as a bar of up to 30 blocks."""
        counts = self.get_difficulty_distribution()
        print("Difficulty distribution:")
        for difficulty in range(1, MAX_DIFFICULTY + 1):
            count = counts.get(difficulty, 0)
            print(f"   {difficulty}/{MAX_DIFFICULTY}: {count:3d}  {'█' * min(count, 30)}")

    def get_summary(self) -> dict[str, Any]:
        """The count, the difficulty distribution, the mean difficulty and the mean task
        length in characters (0 for an empty collection)."""
        total = len(self.scenarios)
        return {
            "total_scenarios": total,
            "difficulty_distribution": dict(self.get_difficulty_distribution()),
            "avg_difficulty": sum(s.difficulty for s in self.scenarios) / total if total else 0,
            "avg_task_length": sum(len(s.task) for s in self.scenarios) / total if total else 0,
        }


def _scenario_list(data: Any) -> Any:
    if isinstance(data, dict):
        if "scenarios" in data:
            return data["scenarios"]
        if data:
            return next(iter(data.values()))
    return data


def preview_scenarios(scenarios: Sequence[Mapping[str, Any]], n: int = 5) -> None:
    """Print the first `n` scenario dicts' tasks (120 characters) and difficulties."""
    for number, scenario in enumerate(scenarios[: max(n, 0)], start=1):
        task = str(scenario["task"])
        cut = task[:120].strip() + ("…" if len(task) > 120 else "")
        print(f"   {number}. {cut}  (difficulty {scenario.get('difficulty', 'N/A')}/5)")


def _as_dicts(items: Sequence[Any], kind: type[MCPTool] | type[MCPResource]) -> list[Any]:
    out = []
    for item in items:
        if isinstance(item, kind):
            out.append(item.to_dict())
        elif isinstance(item, Mapping):
            out.append(kind.from_dict(item).to_dict())
        else:
            raise InvalidInputError(
                f"expected {kind.__name__} objects or dicts, got {type(item).__name__}"
            )
    return out


def scenarios_schema(count: int) -> dict[str, Any]:
    """The JSON schema the generator's answer must follow: exactly `count` scenarios."""
    scenario = {
        "type": "object",
        "properties": {
            "task": {"type": "string"},
            "difficulty": {"type": "integer", "minimum": 1, "maximum": MAX_DIFFICULTY},
        },
        "required": ["task", "difficulty"],
        "additionalProperties": False,
    }
    return {
        "type": "object",
        "properties": {
            "scenarios": {
                "type": "array", "items": scenario, "minItems": count, "maxItems": count,
            }
        },
        "required": ["scenarios"],
        "additionalProperties": False,
    }  # fmt: skip


def scenarios_prompt(
    tools: list[dict[str, Any]], resources: list[dict[str, Any]], count: int, extra: str | None
) -> str:
    """What the generator model is asked."""
    parts = [
        f"Write {count} tasks that a user of an MCP (Model Context Protocol) server could ask "
        "an AI agent to do with the server's tools and resources listed below.",
        "Tools:\n" + json.dumps(tools, indent=2),
        "Resources:\n" + (json.dumps(resources, indent=2) if resources else "(none)"),
        "Make the tasks realistic and varied: different goals and different combinations of "
        "tools, without naming the tools to use. Mix simple tasks (one or two tool calls) "
        "with long multi-step ones. Every task ends with the agent reporting a summary of "
        "what it did and an analysis of what it found.",
        f"Rate each task's difficulty from 1 (one tool call) to {MAX_DIFFICULTY} (a long "
        "multi-step analysis).",
        f'Answer with a JSON object {{"scenarios": [...]}} holding exactly {count} objects, '
        'each with "task" (the request, as text) and "difficulty" (an integer).',
    ]
    if extra:
        parts.append("Also follow these instructions:\n" + extra)
    return "\n\n".join(parts)


async def generate_scenarios(
    tools: Sequence[MCPTool] | Sequence[Mapping[str, Any]],
    resources: Sequence[MCPResource] | Sequence[Mapping[str, Any]] | None = None,
    num_scenarios: int = 24,
    show_preview: bool = True,
    custom_instructions: str | None = None,
    generator_model: str = DEFAULT_GENERATOR_MODEL,
    generator_api_key: str | None = None,
    generator_base_url: str = DEFAULT_GENERATOR_BASE_URL,
) -> GeneratedScenarioCollection:
    """Ask `generator_model` for `num_scenarios` tasks that use `tools` (and `resources`),
    with a JSON schema that fixes their shape and count; the answer is checked and returned
    as a collection (with `show_preview`, its difficulty distribution and first tasks are
    printed). The key defaults to `OPENROUTER_API_KEY`."""
    from openai import AsyncOpenAI

    key = generator_api_key if generator_api_key is not None else os.getenv("OPENROUTER_API_KEY")
    if not key:
        raise InvalidInputError(
            "generate_scenarios needs generator_api_key= or the OPENROUTER_API_KEY variable"
        )
    if isinstance(num_scenarios, bool) or not isinstance(num_scenarios, int) or num_scenarios < 1:
        raise InvalidInputError(f"num_scenarios must be a positive integer, not {num_scenarios!r}")
    tool_dicts = _as_dicts(tools or [], MCPTool)
    resource_dicts = _as_dicts(resources or [], MCPResource)
    if not tool_dicts and not resource_dicts:
        raise InvalidInputError("generate_scenarios needs at least one tool or resource")
    client = AsyncOpenAI(api_key=key, base_url=generator_base_url)
    try:
        response = await client.chat.completions.create(
            model=generator_model,
            messages=[
                {
                    "role": "user",
                    "content": scenarios_prompt(
                        tool_dicts, resource_dicts, num_scenarios, custom_instructions
                    ),
                }
            ],
            max_completion_tokens=8000,
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "scenario_list", "schema": scenarios_schema(num_scenarios)},
            },
        )
    finally:
        await client.close()
    content = response.choices[0].message.content if response.choices else None
    if content is None:
        raise ScenarioGenerationError(f"the generator {generator_model!r} answered no content")
    try:
        listed = _scenario_list(json.loads(content))
    except json.JSONDecodeError as error:
        raise ScenarioGenerationError(
            f"the generator {generator_model!r} answered text that is not JSON ({error}): "
            f"{content[:200]!r}"
        ) from None
    if not isinstance(listed, list):
        raise ScenarioGenerationError(
            f"the generator {generator_model!r} answered no list of scenarios: {content[:200]!r}"
        )
    if len(listed) != num_scenarios:
        raise ScenarioGenerationError(
            f"Expected {num_scenarios} scenarios, got {len(listed)} from {generator_model!r}"
        )
    try:
        collection = GeneratedScenarioCollection.from_dicts(listed)
    except InvalidInputError as error:
        raise ScenarioGenerationError(
            f"the generator {generator_model!r} answered a scenario that is not one: {error}"
        ) from None
    if show_preview:
        collection.print_difficulty_distribution()
        collection.preview(n=min(5, num_scenarios))
    return collection
