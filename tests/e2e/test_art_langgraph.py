"""ART's LangGraph rollouts under `arthex.art.langgraph`: `init_chat_model()` inside a rollout
run through `wrap_rollout(model, rollout)`, a LangGraph ReAct agent on it, against the
LocalBackend's real endpoint with the tiny model taught the weather script."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("fastapi")
pytest.importorskip("langgraph")
pytest.importorskip("langchain_openai")

from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.prebuilt import create_react_agent
from pydantic import BaseModel, create_model

from arthex.art import Trajectory
from arthex.art.langgraph import init_chat_model, wrap_rollout
from arthex.core.capture import conversations, token_samples
from arthex.core.errors import InvalidInputError
from tests.e2e._scripted_model import scripted_model
from tests.e2e._weather import GRAPH_FINAL, GRAPH_QUESTION, SCRIPT, WEATHER, local_model

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:create_react_agent has been moved"),
]


@tool
def get_weather(city: str) -> str:
    """The weather in a city"""
    return WEATHER.get(city, "unknown")


# The schema as the tool the model was taught: LangChain names the tool after the class.
WeatherArgs: type[BaseModel] = create_model(
    "get_weather", __doc__="The weather in a city", city=(str, ...)
)


@pytest.fixture(scope="module")
def base_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    return scripted_model(tmp_path_factory.getbasetemp() / "scripted", SCRIPT)


def test_a_wrapped_langgraph_rollout_returns_its_trajectory_with_the_calls_it_made(
    base_model: str, tmp_path: Path
) -> None:
    seen: dict[str, Any] = {}

    async def rollout(question: str, *, handmade: bool) -> Trajectory:
        llm = init_chat_model(temperature=0, max_completion_tokens=48)
        seen["llm"] = llm.llm
        agent = create_react_agent(llm, [get_weather])
        state = await agent.ainvoke({"messages": [("user", question)]})
        seen["messages"] = list(state["messages"])
        # ART's examples return a trajectory they started with a system message or empty
        start = [{"role": "system", "content": "hand-built"}] if handmade else []
        return Trajectory(messages_and_choices=start, reward=0.75, metrics={"turns": 2})

    async def main() -> tuple[Trajectory, Trajectory, Any]:
        backend, model = local_model(base_model, tmp_path / "art", "graph")
        try:
            await model.register(backend)
            wrapped = wrap_rollout(model, rollout)
            first = await wrapped(GRAPH_QUESTION["content"], handmade=False)
            second = await wrapped(GRAPH_QUESTION["content"], handmade=True)
            return first, second, model
        finally:
            await model.close()
            await backend.close()

    first, second, model = asyncio.run(main())
    # the chat model was langchain-openai's, on the model's endpoint, with training's logprobs
    llm = seen["llm"]
    assert llm.model_name == model.get_inference_name()
    assert str(llm.openai_api_base) == model.inference_base_url
    assert llm.logprobs is True and llm.temperature == 0

    asked, answered = [m for m in seen["messages"] if isinstance(m, AIMessage)]
    assert asked.tool_calls[0]["args"] == {"city": "Paris"}
    assert [m.content for m in seen["messages"] if isinstance(m, ToolMessage)] == [WEATHER["Paris"]]
    assert answered.content == GRAPH_FINAL
    for trajectory in (first, second):
        calls = trajectory.exchanges.chat_completions
        assert len(calls) == 2
        assert trajectory.reward == 0.75 and trajectory.metrics["turns"] == 2
        # the hand-built start gave way to what was sent
        assert trajectory.messages_and_choices == [] and trajectory.tools is None
        assert calls[0].request["logprobs"] is True
        assert calls[1].response.choices[0].message.content == GRAPH_FINAL
        (conversation,) = conversations(trajectory)
        assert [m["role"] for m in conversation.messages] == [
            "user", "assistant", "tool", "assistant",
        ]  # fmt: skip
        (sample,) = token_samples(trajectory, model.get_inference_name())
        extras = [c.response.choices[0].model_extra or {} for c in calls]
        recorded = [t for extra in extras for t in extra["token_ids"]]
        assert list(sample.sampled) == recorded


def test_structured_output_is_the_first_tool_calls_arguments_validated(
    base_model: str, tmp_path: Path
) -> None:
    async def rollout() -> Trajectory:
        llm = init_chat_model(temperature=0, max_completion_tokens=48)
        answer = await llm.with_structured_output(WeatherArgs).ainvoke(
            [("user", GRAPH_QUESTION["content"])]
        )
        return Trajectory(reward=1.0, metadata={"city": answer.city})

    async def main() -> Trajectory:
        backend, model = local_model(base_model, tmp_path / "art", "structured")
        try:
            await model.register(backend)
            return await wrap_rollout(model, rollout)()
        finally:
            await model.close()
            await backend.close()

    trajectory = asyncio.run(main())
    assert trajectory.metadata["city"] == "Paris"
    (call,) = trajectory.exchanges.chat_completions
    assert [t["function"]["name"] for t in call.request["tools"]] == ["get_weather"]


def test_outside_a_wrapped_rollout_init_chat_model_says_where_it_belongs() -> None:
    with pytest.raises(InvalidInputError, match=r"inside a rollout run through wrap_rollout"):
        init_chat_model()
    with pytest.raises(InvalidInputError, match=r"not provider 'anthropic'"):
        init_chat_model(model_provider="anthropic")
    with pytest.raises(InvalidInputError, match=r"config_prefix is not supported"):
        init_chat_model(config_prefix="x")
