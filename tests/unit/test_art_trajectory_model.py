"""ART's trajectory data model under `arthex.art.trajectories`: what each class refuses, and
how, with the field named; typed records of the other three APIs kept in a trajectory as the
JSON a file holds; and the one-history selection of the derived chat histories. (That the
objects and the derived histories are ART's, dump for dump, is the interop suite's
test_art_trajectory_histories.py.)"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from openai.types.chat.chat_completion import Choice
from pydantic import ValidationError

import arthex.art.trajectories as art
from arthex.core.errors import UnsupportedCapability
from arthex.core.exchanges import ChatCompletionsExchange, TrajectoryExchanges
from arthex.core.trajectories import Trajectory
from arthex.utils.anthropic_histories import (
    anthropic_messages_histories,
    anthropic_messages_history,
)
from arthex.utils.art_histories import chat_completions_history
from arthex.utils.completions_histories import (
    completions_string_history,
    completions_token_histories,
    completions_token_history,
)
from arthex.utils.trajectory_histories import trajectory_histories, trajectory_history

COMPLETION: dict[str, Any] = {
    "start_time": "2026-01-01T00:00:00Z",
    "end_time": "2026-01-01T00:00:01Z",
    "request": {"model": "agent@1", "prompt": "2+2=", "max_tokens": 4},
    "response": {
        "id": "cmpl-1",
        "object": "text_completion",
        "created": 1767225600,
        "model": "served",
        "choices": [{"index": 0, "text": " 4", "finish_reason": "stop", "logprobs": None}],
    },
}
MESSAGE: dict[str, Any] = {
    "start_time": "2026-01-01T00:00:04+02:00",
    "end_time": "2026-01-01T00:00:05+02:00",
    "request": {"max_tokens": 64, "messages": [{"role": "user", "content": "Hi"}]},
    "response": {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
        "content": [{"type": "text", "text": "Hello."}],
        "usage": {"input_tokens": 3, "output_tokens": 2},
    },
}


def chat(second: int, model: str, messages: list[dict[str, Any]], reply: str) -> dict[str, Any]:
    return {
        "start_time": f"2026-01-01T00:00:{second:02d}Z",
        "end_time": f"2026-01-01T00:00:{second:02d}Z",
        "request": {"model": model, "messages": messages},
        "response": {
            "id": f"c{second}",
            "object": "chat.completion",
            "created": 1,
            "model": "served",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": reply},
                }
            ],
        },
    }


def test_the_art_names_are_these_classes() -> None:
    assert art.ChatCompletionsExchange is ChatCompletionsExchange
    assert art.TrajectoryExchanges is TrajectoryExchanges
    assert issubclass(art.ChatCompletionsHistory, art.History)
    assert art.TokenFlag.SAMPLED | art.TokenFlag.EXACT == 3
    assert int(art.TokenFlag.PROCESSED_LOGPROBS) == 64


def test_a_record_names_its_model_and_drops_it_on_read() -> None:
    exchange = art.MessagesExchange.model_validate({**MESSAGE, "model": "stale"})
    assert exchange.model == "claude-x"  # the request names none: the response's
    assert exchange.start_time.isoformat() == "2025-12-31T22:00:04+00:00"
    dumped = exchange.model_dump(mode="json")
    assert dumped["model"] == "claude-x" and dumped["response"] == MESSAGE["response"]
    assert art.MessagesExchange.model_validate(dumped) == exchange
    call = ChatCompletionsExchange.model_validate(chat(0, "agent@3", [], "hi"))
    assert call.model_dump(mode="json")["model"] == "agent@3"


def test_typed_records_are_kept_as_the_json_a_file_holds() -> None:
    exchanges = TrajectoryExchanges(
        completions=[art.CompletionsExchange.model_validate(COMPLETION)],
        messages=[art.MessagesExchange.model_validate(MESSAGE)],
    )
    read = TrajectoryExchanges.model_validate({"completions": [COMPLETION], "messages": [MESSAGE]})
    assert exchanges.messages == [{**MESSAGE, "start_time": "2025-12-31T22:00:04Z",
                                   "end_time": "2025-12-31T22:00:05Z"}]  # fmt: skip
    assert "model" not in exchanges.completions[0]
    typed = art.CompletionsExchange.model_validate(read.completions[0])
    assert typed.model == "agent@1" and typed.response.choices[0].text == " 4"


@pytest.mark.parametrize(
    ("name", "data", "field"),
    [
        ("ChatCompletionsMessageSource", {"request_index": "0"}, "request_index"),
        ("ResponsesItemSource", {"output_index": 1.0}, "output_index"),
        ("CompletionsSource", {"choice_index": 0}, "prompt_index"),
        ("CompletionsTokenSourceSpan", {"start": 0, "end": 1}, "source"),
        ("ChatCompletionsHistory", {"model": "m", "messages": []}, "message_sources"),
        ("ChatCompletionsHistory", {"messages": [], "message_sources": []}, "model"),
        ("AnthropicMessagesHistory", {"model": None}, "model"),
        ("ResponsesHistory", {"model": "m", "input": "hi", "input_sources": []}, "input"),
        ("CompletionsTokenHistory", {"prompt": "1 2"}, "prompt"),
        ("CompletionsStringHistory", {"sampled_spans": [[0]]}, "sampled_spans"),
        ("ChatCompletionsHistory", {"turns": 2}, "turns"),
    ],
)
def test_a_malformed_value_is_refused_naming_its_field(
    name: str, data: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        getattr(art, name).model_validate(data)
    assert field in {str(part) for error in refused.value.errors() for part in error["loc"]}


def test_a_source_is_frozen_and_its_indices_strict() -> None:
    source = art.ChatCompletionsMessageSource(
        exchange=ChatCompletionsExchange.model_validate(chat(0, "m", [], "hi")), choice_index=0
    )
    with pytest.raises(ValidationError, match="frozen"):
        source.choice_index = 1  # type: ignore[misc]
    with pytest.raises(ValidationError, match="valid integer"):
        art.ChatCompletionsMessageSource(exchange=source.exchange, choice_index=True)


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"content": "Hello."}, "needs 'content' as a JSON array; got 'Hello.'"),
        ({"usage": None}, "needs 'usage' as a JSON object; got None"),
        ({"type": "error"}, "type 'message' and role 'assistant'; got type 'error'"),
    ],
)
def test_an_anthropic_reply_without_a_messages_shape_is_refused(
    change: dict[str, Any], says: str
) -> None:
    with pytest.raises(ValidationError, match=says):
        art.MessagesExchange.model_validate(
            {**MESSAGE, "response": {**MESSAGE["response"], **change}}
        )


def test_the_other_apis_are_not_chat_histories() -> None:
    responses = art.ResponsesHistory(model="m", input=[], input_sources=[])
    with pytest.raises(ValueError, match="ResponsesHistory cannot be represented as Chat"):
        responses.as_chat_completions_history()
    tokens = art.CompletionsTokenHistory(model="m", prompt=[1], prompt_sources=[], sampled_spans=[])
    with pytest.raises(ValueError, match="no chat-message structure"):
        tokens.as_chat_completions_history()
    history = art.ChatCompletionsHistory(model=None, messages=[], message_sources=[])
    assert history.as_chat_completions_history() is history


def test_one_history_is_asked_for_by_model_when_several_answered() -> None:
    hi = [{"role": "user", "content": "Hi"}]
    trajectory = Trajectory.model_validate(
        {"exchanges": {"chat_completions": [chat(0, "agent", hi, "a"), chat(1, "judge", hi, "b")]}}
    )
    with pytest.raises(ValueError, match="requires exactly one model; pass model= to select"):
        chat_completions_history(trajectory)
    assert chat_completions_history(trajectory, model="judge").messages[-1]["content"] == "b"
    rewritten = Trajectory.model_validate(
        {"exchanges": {"chat_completions": [chat(0, "agent", hi, "a"), chat(1, "agent", [], "b")]}}
    )
    with pytest.raises(ValueError, match="exactly one history; found 2"):
        chat_completions_history(rewritten)


def test_get_messages_turns_a_choice_into_the_assistant_message() -> None:
    choice = Choice.model_validate(
        {
            "index": 0,
            "finish_reason": "tool_calls",
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            },
        }
    )
    user = {"role": "user", "content": None}
    messages = art.get_messages([user, choice])  # type: ignore[list-item]
    assert messages == [
        {"role": "user", "content": ""},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
    ]
    assert user == {"role": "user", "content": None}  # not changed in place
    assert copy.deepcopy(messages) == messages


@pytest.mark.parametrize(
    ("messages", "says"),
    [
        ("Hi", "Anthropic messages must be a list"),
        (["Hi"], "Anthropic messages must be JSON objects"),
        ([{"role": "user", "content": 3}], "Anthropic message content must be text or a list"),
        ([{"role": "user", "content": ["Hi"]}], "content blocks must be JSON objects"),
    ],
)
def test_an_anthropic_request_that_is_not_messages_is_refused(messages: object, says: str) -> None:
    record = {**MESSAGE, "request": {**MESSAGE["request"], "messages": messages}}
    trajectory = Trajectory.model_validate({"exchanges": {"messages": [record]}})
    with pytest.raises(ValueError, match=says):
        anthropic_messages_histories(trajectory)


def test_anthropic_histories_need_messages_calls_of_the_model() -> None:
    hi = [{"role": "user", "content": "Hi"}]
    trajectory = Trajectory.model_validate(
        {"exchanges": {"chat_completions": [chat(0, "a", hi, "b")]}}
    )
    with pytest.raises(ValueError, match="no Anthropic Messages exchanges for model 'claude-x'"):
        anthropic_messages_history(trajectory, model="claude-x")
    with_message = Trajectory.model_validate({"exchanges": {"messages": [MESSAGE]}})
    found = anthropic_messages_history(with_message, model="claude-*")
    assert found.model == "claude-x" and found.system_source is None
    reply = {"role": "assistant", "content": MESSAGE["response"]["content"]}
    assert found.messages == [*MESSAGE["request"]["messages"], reply]


def test_an_echoed_completions_prompt_is_refused_in_one_line() -> None:
    echoed = {**COMPLETION, "request": {**COMPLETION["request"], "echo": True}}
    trajectory = Trajectory.model_validate({"exchanges": {"completions": [echoed]}})
    with pytest.raises(ValueError, match="does not derive histories of echoed Completions"):
        completions_token_histories(trajectory)


def test_a_completions_history_from_the_prompt_and_sampled_ids() -> None:
    choice = {**COMPLETION["response"]["choices"][0], "prompt_token_ids": [7, 8], "token_ids": [9]}
    call = {**COMPLETION, "response": {**COMPLETION["response"], "choices": [choice]}}
    history = completions_token_history(
        Trajectory.model_validate({"exchanges": {"completions": [call]}})
    )
    assert history.prompt == [7, 8, 9] and history.sampled_spans == [(2, 3)]
    assert [
        (s.start, s.end, s.source and s.source.choice_index) for s in history.prompt_sources
    ] == [
        (0, 2, None),
        (2, 3, 0),
    ]


def test_an_echo_that_does_not_start_with_the_prompt_is_refused() -> None:
    echoed = {**COMPLETION, "request": {**COMPLETION["request"], "echo": True}}
    trajectory = Trajectory.model_validate({"exchanges": {"completions": [echoed]}})
    with pytest.raises(ValueError, match="Cannot locate echoed Completions prompt boundary"):
        completions_string_history(trajectory)
    choice = {**COMPLETION["response"]["choices"][0], "text": "2+2= 4"}
    echoed["response"] = {**COMPLETION["response"], "choices": [choice]}
    history = completions_string_history(
        Trajectory.model_validate({"exchanges": {"completions": [echoed]}})
    )
    assert history.prompt == "2+2= 4" and history.sampled_spans == [(4, 6)]


def test_the_dispatcher_refuses_responses_calls_saying_so() -> None:
    record = {
        "start_time": "2026-01-01T00:00:00Z",
        "end_time": "2026-01-01T00:00:01Z",
        "request": {"model": "agent@1", "input": "Hi"},
        "response": {"id": "r", "object": "response", "created_at": 1, "model": "served",
                     "output": [], "parallel_tool_calls": True, "tool_choice": "auto",
                     "tools": []},
    }  # fmt: skip
    trajectory = Trajectory.model_validate({"exchanges": {"responses": [record]}})
    with pytest.raises(UnsupportedCapability, match="Responses histories"):
        trajectory_histories(trajectory)
    hi = [{"role": "user", "content": "Hi"}]
    two = Trajectory.model_validate(
        {"exchanges": {"chat_completions": [chat(0, "a", hi, "x"), chat(1, "b", hi, "y")]}}
    )
    with pytest.raises(ValueError, match="Trajectory history requires exactly one model"):
        trajectory_history(two)
    assert trajectory_history(two, model="b").messages[-1]["content"] == "y"  # type: ignore[union-attr]
