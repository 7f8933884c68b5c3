"""LangChain messages as OpenAI chat messages (`arthex.art.langgraph.message_utils`): worked
examples, written out by hand in OpenAI's chat format."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("langchain_core")

from langchain_core.messages import (
    AIMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from openai.types.chat.chat_completion import Choice

from arthex.art.langgraph.message_utils import (
    convert_langgraph_messages,
    langchain_msg_to_openai,
    make_message_param,
)
from arthex.art.trajectories import Trajectory
from arthex.core.errors import InvalidInputError

CALL = {"name": "get_weather", "args": {"city": "Paris"}, "id": "call_1", "type": "tool_call"}
OPENAI_CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
}
LOGPROBS = {"content": [{"token": "Hi", "logprob": -0.5, "bytes": [72, 105], "top_logprobs": []}]}


def test_each_kind_of_message_becomes_its_role() -> None:
    assert langchain_msg_to_openai(HumanMessage("hello")) == {"role": "user", "content": "hello"}
    assert langchain_msg_to_openai(SystemMessage("be brief")) == {
        "role": "system", "content": "be brief",
    }  # fmt: skip
    assert langchain_msg_to_openai(ToolMessage("sunny", tool_call_id="call_1")) == {
        "role": "tool", "content": "sunny", "tool_call_id": "call_1",
    }  # fmt: skip
    assert langchain_msg_to_openai(FunctionMessage(content="42", name="f")) == {
        "role": "function", "content": "42",
    }  # fmt: skip
    # an assistant turn that only called a tool: empty content as "", the call in OpenAI's form
    assert langchain_msg_to_openai(AIMessage("", tool_calls=[CALL])) == {
        "role": "assistant", "content": "", "tool_calls": [OPENAI_CALL],
    }  # fmt: skip
    with pytest.raises(InvalidInputError, match="unsupported LangChain message type ChatMessage"):
        langchain_msg_to_openai(ChatMessage(content="x", role="critic"))


def test_an_answer_with_logprobs_becomes_a_choice_and_the_rest_stay_messages() -> None:
    answer = AIMessage(
        "",
        tool_calls=[CALL],
        response_metadata={"logprobs": LOGPROBS, "finish_reason": "tool_calls", "model_name": "m"},
    )
    plain = {"role": "user", "content": "as is"}
    converted = convert_langgraph_messages([HumanMessage("hi"), answer, plain])
    assert converted[0] == {"role": "user", "content": "hi"}
    assert converted[2] is plain
    choice = converted[1]
    assert isinstance(choice, Choice)
    assert choice.model_dump(mode="json", exclude_none=True) == {
        "index": 0,
        "finish_reason": "tool_calls",
        "logprobs": LOGPROBS,
        "message": {"role": "assistant", "content": "", "tool_calls": [OPENAI_CALL]},
        "model_name": "m",
    }
    assert json.loads(OPENAI_CALL["function"]["arguments"]) == CALL["args"]  # type: ignore[index]
    # the converted list is a trajectory's conversation, its Choice trainable
    trajectory = Trajectory(messages_and_choices=converted, reward=1.0)
    assert trajectory.messages_and_choices[1] == choice
    assert CALL["args"] == {"city": "Paris"}  # the message's own call was not changed
    with pytest.raises(InvalidInputError, match="unsupported message type int"):
        convert_langgraph_messages([3])


def test_make_message_param_checks_the_role() -> None:
    assert make_message_param("developer", content="rules") == {
        "role": "developer", "content": "rules",
    }  # fmt: skip
    with pytest.raises(InvalidInputError, match="unsupported message role 'robot'"):
        make_message_param("robot", content="x")


def test_role_to_param_is_each_roles_openai_message_type() -> None:
    from openai.types.chat import (
        ChatCompletionAssistantMessageParam,
        ChatCompletionDeveloperMessageParam,
        ChatCompletionFunctionMessageParam,
        ChatCompletionSystemMessageParam,
        ChatCompletionToolMessageParam,
        ChatCompletionUserMessageParam,
    )

    from arthex.art.langgraph.message_utils import role_to_param

    # ART's table (art/langgraph/message_utils.py): the OpenAI SDK's TypedDict of each role
    assert role_to_param == {
        "user": ChatCompletionUserMessageParam,
        "assistant": ChatCompletionAssistantMessageParam,
        "system": ChatCompletionSystemMessageParam,
        "tool": ChatCompletionToolMessageParam,
        "function": ChatCompletionFunctionMessageParam,
        "developer": ChatCompletionDeveloperMessageParam,
    }
    # a TypedDict builds the plain dict of what it is given
    assert role_to_param["tool"](content="4", tool_call_id="call_1") == {
        "content": "4",
        "tool_call_id": "call_1",
    }
    for role in role_to_param:  # make_message_param takes exactly these roles
        assert make_message_param(role, content="x") == {"role": role, "content": "x"}
    with pytest.raises(InvalidInputError, match="critic"):
        make_message_param("critic", content="x")
