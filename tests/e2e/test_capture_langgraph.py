"""A LangGraph ReAct agent on langchain-openai's own client, pointed at the LocalBackend's
endpoint by its base_url alone, captured without a change to the agent."""

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
from langchain_openai import ChatOpenAI
from langgraph.prebuilt import create_react_agent

import arthex
from arthex.core.capture import conversations, token_samples
from arthex.core.trajectories import Trajectory
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


@pytest.fixture(scope="module")
def base_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    return scripted_model(tmp_path_factory.getbasetemp() / "scripted", SCRIPT)


def test_a_langgraph_agent_on_its_own_client_is_captured(base_model: str, tmp_path: Path) -> None:
    async def main() -> tuple[Trajectory, list[Any], Trajectory]:
        backend, model = local_model(base_model, tmp_path / "art", "graph")
        try:
            await model.register(backend)
            endpoint = model.openai_client()
            # The framework builds its own OpenAI client from the base URL; nothing of
            # arthex is passed to it. `localhost` instead of 127.0.0.1, as a user might write.
            base_url = str(endpoint.base_url).replace("127.0.0.1", "localhost")
            llm = ChatOpenAI(
                model=model.get_inference_name(), base_url=base_url, api_key=endpoint.api_key,
                temperature=0, logprobs=True, max_completion_tokens=48,
            )  # fmt: skip
            agent = create_react_agent(llm, [get_weather])
            async with arthex.capture() as trajectory:
                state = await agent.ainvoke({"messages": [("user", GRAPH_QUESTION["content"])]})

            def run_sync() -> Trajectory:  # the sync path (langgraph's threads, sync client)
                with arthex.capture() as captured:
                    agent.invoke({"messages": [("user", GRAPH_QUESTION["content"])]})
                return captured

            synced = await asyncio.to_thread(run_sync)
            return trajectory, list(state["messages"]), synced
        finally:
            await model.close()
            await backend.close()

    trajectory, messages, synced = asyncio.run(main())
    calls = trajectory.exchanges.chat_completions
    assert len(calls) == 2
    asked, answered = [m for m in messages if isinstance(m, AIMessage)]
    assert asked.tool_calls[0]["name"] == "get_weather"
    assert asked.tool_calls[0]["args"] == {"city": "Paris"}
    assert [m.content for m in messages if isinstance(m, ToolMessage)] == [WEATHER["Paris"]]
    assert answered.content == GRAPH_FINAL

    # What the framework saw is what was recorded.
    first = calls[0].response.choices[0].message
    assert first.tool_calls is not None
    assert first.tool_calls[0].model_dump()["function"]["arguments"] == '{"city": "Paris"}'
    assert calls[1].response.choices[0].message.content == GRAPH_FINAL
    assert calls[1].request["messages"][-1]["content"] == WEATHER["Paris"]
    (conversation,) = conversations(trajectory)
    assert [m["role"] for m in conversation.messages] == ["user", "assistant", "tool", "assistant"]

    # The framework re-sends the history unchanged, so both calls make one exact sample.
    (sample,) = token_samples(trajectory, "graph")
    recorded = [t for c in calls for t in (c.response.choices[0].model_extra or {})["token_ids"]]
    assert list(sample.sampled) == recorded
    assert sample.choices == 2

    def contents(captured: Trajectory) -> list[list[Any]]:  # tool-call ids differ per run
        return [
            [m["content"] for m in e.request["messages"]]
            for e in captured.exchanges.chat_completions
        ]

    assert contents(synced) == contents(trajectory)
