"""Conversations rebuilt from recorded calls: which re-sends continue a conversation and which
start one, with hand-written requests whose expected threading is worked out by reading them."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from openai.types.chat import ChatCompletion

from arthex.core.capture import conversations
from arthex.core.exchanges import ChatCompletionsExchange, TrajectoryExchanges
from arthex.core.trajectories import History, Trajectory
from arthex.testing.builders import make_choice

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SYSTEM = {"role": "system", "content": "You check the weather."}
USER = {"role": "user", "content": "Paris?"}
CALL: dict[str, Any] = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "C"}'},
}


def exchange(
    messages: object, reply: str | None = "ok", *, at: int = 0, tools: object = None, **choice: Any
) -> ChatCompletionsExchange:
    request: dict[str, Any] = {"model": "agent@0"}
    if messages is not None:
        request["messages"] = messages
    if tools is not None:
        request["tools"] = tools
    response = ChatCompletion.model_validate(
        {
            "id": "c",
            "object": "chat.completion",
            "created": 0,
            "model": "agent@0",
            "choices": [make_choice(reply, **choice).model_dump()],
        }
    )
    start = T0 + timedelta(seconds=at)
    return ChatCompletionsExchange(
        start_time=start, end_time=start + timedelta(seconds=1), request=request, response=response
    )


def threads(*calls: ChatCompletionsExchange) -> list[list[dict[str, Any]]]:
    trajectory = Trajectory(exchanges=TrajectoryExchanges(chat_completions=list(calls)))
    return [list(conversation.messages) for conversation in conversations(trajectory)]


def assistant(content: str | None = None, calls: list[dict[str, Any]] | None = None) -> Any:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls is not None:
        message["tool_calls"] = calls
    return message


def first_turn() -> ChatCompletionsExchange:
    return exchange([SYSTEM, USER], None, tool_calls=[CALL])


def test_a_resend_in_another_clients_spelling_continues_the_conversation() -> None:
    # The reply had content None and arguments as a JSON string; this client re-sends content
    # "", the arguments as an object with its keys in another order, and adds null fields.
    resent_call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": {"unit": "C", "city": "Paris"}},
    }
    second = exchange(
        [SYSTEM, USER, {**assistant("", [resent_call]), "name": None},
         {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}],
        "Sunny.", at=1,
    )  # fmt: skip
    (conversation,) = threads(first_turn(), second)
    assert [m["role"] for m in conversation] == ["system", "user", "assistant", "tool", "assistant"]
    assert conversation[-1] == {"role": "assistant", "content": "Sunny."}


def test_a_flat_tool_call_and_content_parts_in_any_key_order_continue_the_conversation() -> None:
    parts = [{"type": "text", "text": "Paris?"}]
    first = exchange([SYSTEM, {"role": "user", "content": parts}], None, tool_calls=[CALL])
    flat = {"id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris", "unit": "C"}'}
    reordered = [{"text": "Paris?", "type": "text"}]
    second = exchange(
        [SYSTEM, {"role": "user", "content": reordered}, assistant(None, [CALL]),
         {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}],
        at=1,
    )  # fmt: skip
    assert len(threads(first, second)) == 1
    # A flat call is keyed by its own name and arguments: a different flat call is different.
    third = exchange([SYSTEM, USER, assistant(None, [flat])], at=2)
    fourth = exchange([SYSTEM, USER, assistant(None, [flat]), assistant("ok"), USER], at=3)
    other = {**flat, "name": "get_time"}
    fifth = exchange([SYSTEM, USER, assistant(None, [other]), assistant("ok"), USER], at=4)
    assert [len(t) for t in threads(third, fourth, fifth)] == [6, 6]


def resent_with(last: dict[str, Any]) -> ChatCompletionsExchange:
    """The first turn's history re-sent with `last` in place of the assistant reply."""
    return exchange([SYSTEM, USER, last, {"role": "user", "content": "more"}], at=1)


def test_a_resend_that_differs_in_any_identifying_field_starts_a_new_conversation() -> None:
    variants: list[dict[str, Any]] = [
        assistant("I will check.", [CALL]),  # the content
        {**assistant(None, [CALL]), "role": "user"},  # the role
        assistant(None, [{**CALL, "id": "call_2"}]),  # the call's id
        assistant(None, [{**CALL, "function": {**CALL["function"], "name": "get_time"}}]),
        assistant(None, [{**CALL, "function": {**CALL["function"], "arguments": "{}"}}]),
        assistant(None, []),  # no call at all
        {**assistant(None, [CALL]), "tool_call_id": "call_1"},
    ]
    for variant in variants:
        found = threads(first_turn(), resent_with(variant))
        assert len(found) == 2, variant
    # ... while the same reply, re-sent as it came, continues it
    assert len(threads(first_turn(), resent_with(assistant(None, [CALL])))) == 1


def test_list_contents_that_differ_are_different_messages() -> None:
    first = exchange([{"role": "user", "content": [{"type": "text", "text": "a"}]}], "x")
    second = exchange(
        [{"role": "user", "content": [{"type": "text", "text": "b"}]}, assistant("x"), USER], at=1
    )
    assert len(threads(first, second)) == 2


def test_an_identical_call_made_twice_gives_two_conversations() -> None:
    assert len(threads(first_turn(), exchange([SYSTEM, USER], None, at=1, tool_calls=[CALL]))) == 2


def test_a_conversation_continues_only_the_thread_it_extends() -> None:
    a = exchange([{"role": "user", "content": "a"}], "x")
    b = exchange([{"role": "user", "content": "b"}, assistant("y"), USER], at=1)
    assert [t[0]["content"] for t in threads(a, b)] == ["a", "b"]


def test_conversations_come_in_the_order_their_calls_started() -> None:
    # Recorded in order of completion: the sub-agent's call, started later, completed first.
    main = exchange([{"role": "user", "content": "main"}], "x", at=0)
    sub = exchange([{"role": "user", "content": "sub"}], "y", at=5)
    assert [t[0]["content"] for t in threads(sub, main)] == ["main", "sub"]
    # Calls that started together keep their recorded order.
    also = exchange([{"role": "user", "content": "also"}], "z", at=0)
    assert [t[0]["content"] for t in threads(also, main)] == ["also", "main"]


def test_a_request_without_a_message_list_gives_the_reply_alone() -> None:
    assert threads(exchange(None, "x"), exchange("not a list", "y", at=1)) == [
        [assistant("x")],
        [assistant("y")],
    ]


def test_the_request_tools_go_with_their_conversation() -> None:
    tools = [{"type": "function", "function": {"name": "get_weather"}}]
    trajectory = Trajectory(
        exchanges=TrajectoryExchanges(
            chat_completions=[exchange([USER], "x", tools=tools), exchange([SYSTEM], "y", at=1)]
        )
    )
    assert [c.tools for c in conversations(trajectory)] == [tuple(tools), None]


def test_a_hand_built_trajectory_gives_its_main_conversation_then_each_history() -> None:
    tool = {"type": "function", "function": {"name": "lookup"}}
    trajectory = Trajectory(
        messages_and_choices=[SYSTEM, USER, make_choice("Sunny.")],
        tools=[tool],
        additional_histories=[
            History(messages_and_choices=[USER, make_choice(None, tool_calls=[CALL])], tools=[]),
            History(messages_and_choices=[{"role": "user", "content": "bye"}]),
        ],
    )
    main, tool_history, bye = conversations(trajectory)
    assert main.messages == (SYSTEM, USER, {"role": "assistant", "content": "Sunny."})
    assert main.tools == (tool,)
    assert tool_history.messages == (USER, assistant("", [CALL]))  # one spelling: "" for none
    assert tool_history.tools == ()
    assert bye.messages == ({"role": "user", "content": "bye"},) and bye.tools is None


def test_a_reply_without_text_reads_the_same_in_every_conversation() -> None:
    """Hand-built main conversation, a history and a captured call: one spelling of a
    tool-calling reply with no text (content "", ART's rule), and `messages()` agrees."""
    calling = make_choice(None, tool_calls=[CALL])
    hand_built = Trajectory(
        messages_and_choices=[USER, calling],
        additional_histories=[History(messages_and_choices=[USER, calling])],
    )
    captured = Trajectory(
        exchanges=TrajectoryExchanges(chat_completions=[exchange([USER], None, tool_calls=[CALL])])
    )
    replies = [
        *(c.messages[-1] for c in conversations(hand_built)),
        conversations(captured)[0].messages[-1],
        hand_built.messages()[-1],
        captured.messages()[-1],
    ]
    assert all(reply["content"] == "" for reply in replies), replies
    assert len({json.dumps(reply, sort_keys=True) for reply in replies}) == 1


def test_a_messages_content_reads_as_plain_text_in_every_shape() -> None:
    from arthex.core.chat_types import content_text

    parts = [{"type": "text", "text": "look:"}, {"type": "image_url", "image_url": {}}]
    assert content_text(None) == "" and content_text("hi") == "hi"
    assert content_text(parts) == "look:\n<image_url>"
    assert content_text(parts, " ") == "look: <image_url>"
    assert content_text({"a": 1}) == '{"a": 1}'
