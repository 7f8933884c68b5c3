"""ART's renderer path of `art.tinker_native.data` under `arthex.art`, on worked examples: the
renderer here is a role:content renderer written in this file with the interface of
tinker-cookbook's (`build_generation_prompt`, `create_conversation_prefix_with_tools`,
`parse_response`, `to_openai_message`), its tokens the UTF-8 bytes of the text, so each
expected Datum is laid out by hand. The same functions run against ART's own with the real
cookbook renderers in tests/interop/test_art_tinker_native_data.py. And
`art.tinker.renderers.renderer_name_message`."""

from __future__ import annotations

import importlib.util
import json
from typing import Any

import pytest
from openai.types.chat.chat_completion import ChoiceLogprobs

from arthex.art.tinker import renderers
from arthex.core.errors import InvalidInputError
from arthex.core.trajectories import History
from arthex.testing.builders import make_choice

tinker = pytest.importorskip("tinker")

from arthex.art.tinker_native import data  # noqa: E402

NOT_A_LIST: Any = "hi"
NOT_DICTS: Any = ["hi"]
WEATHER = {"name": "get_weather", "description": "The weather", "parameters": {}}


class ByteRenderer:
    """`Role: content` lines, then `Assistant:` to generate; a tool prefix is one system
    message listing the tools' names."""

    def build_generation_prompt(self, messages: list[dict[str, Any]]) -> Any:
        text = "".join(f"{m['role'].capitalize()}: {m['content']}\n" for m in messages)
        return tinker.ModelInput.from_ints(list((text + "Assistant:").encode()))

    def create_conversation_prefix_with_tools(
        self, tools: list[dict[str, Any]], system_prompt: str = ""
    ) -> list[dict[str, Any]]:
        names = ", ".join(tool["name"] for tool in tools)
        return [{"role": "system", "content": f"{system_prompt} Tools: {names}".strip()}]

    def parse_response(self, response: list[int]) -> tuple[dict[str, Any], bool]:
        return {"role": "assistant", "content": bytes(response).decode()}, True

    def to_openai_message(self, message: dict[str, Any]) -> dict[str, Any]:
        return {"role": "assistant", "content": message["content"]}


class Vocabulary:
    """A tokenizer's `convert_tokens_to_ids`: known pieces have ids, others None."""

    def convert_tokens_to_ids(self, token: str) -> int | None:
        return {"Sun": 300, "ny": 301}.get(token)


def logprob_entries(*pairs: tuple[str, float]) -> dict[str, Any]:
    return {
        "content": [
            {"token": token, "logprob": value, "bytes": None, "top_logprobs": []}
            for token, value in pairs
        ],
        "refusal": None,
    }


def with_logprobs(content: str, logprobs: dict[str, Any] | None) -> Any:
    return make_choice(content).model_copy(
        update={"logprobs": None if logprobs is None else ChoiceLogprobs.model_validate(logprobs)}
    )


def test_renderer_name_message_lists_the_renderer_names() -> None:
    message = renderers.renderer_name_message
    listed = [line[2:] for line in message.splitlines() if line.startswith("- ")]
    assert (
        len(listed) == 19 and listed[0] == "role_colon" and listed[-1] == "gpt_oss_high_reasoning"
    )
    assert {"qwen3_disable_thinking", "qwen3_5_disable_thinking", "kimi_k25"} <= set(listed)
    assert "renderers.get_renderer(" in message


def test_find_last_choice_gives_the_last_choice_and_its_index() -> None:
    user = {"role": "user", "content": "hi"}
    first, last = make_choice("a"), make_choice("b")
    assert data.find_last_choice([user, first, user, last, user]) == (3, last)
    assert data.find_last_choice([user]) is None
    assert data.find_last_choice([]) is None


def test_extract_logprobs_reads_token_ids_and_token_strings() -> None:
    choice = with_logprobs(
        "Sunny",
        logprob_entries(
            ("token_id:41", -0.25), ("Sun", -0.5), ("ny", -0.75), ("token_id:x", -1.0),
            ("unknown", -2.0), ("token_id:12:7", -3.0),
        ),
    )  # fmt: skip
    assert data.extract_logprobs_from_choice(choice, Vocabulary()) == (
        [41, 300, 301, 12],
        [-0.25, -0.5, -0.75, -3.0],
    )
    assert data.extract_logprobs_from_choice(with_logprobs("x", None), Vocabulary()) == ([], [])
    refusal = {"content": None, "refusal": logprob_entries(("token_id:5", -0.5))["content"]}
    assert data.extract_logprobs_from_choice(with_logprobs("x", refusal), None) == ([5], [-0.5])
    with pytest.raises(InvalidInputError, match="choice must be an openai Choice, got dict"):
        data.extract_logprobs_from_choice({"logprobs": None}, None)  # type: ignore[arg-type]


def test_convert_declares_tools_in_the_renderers_prefix() -> None:
    system = {"role": "system", "content": "Be brief."}
    user = {"role": "user", "content": "Weather?"}
    tools: list[dict[str, Any]] = [{"type": "function", "function": WEATHER}, {"name": "raw_spec"}]
    converted = data.convert_openai_messages_to_renderer_format(
        [system, user], tools, ByteRenderer()
    )
    assert converted == [
        {"role": "system", "content": "Be brief. Tools: get_weather, raw_spec"},
        {"role": "user", "content": "Weather?"},
    ]
    # without a first system message the tools are not declared (ART's rule)
    assert data.convert_openai_messages_to_renderer_format(
        [user, system], tools, ByteRenderer()
    ) == [user, system]
    others: list[dict[str, Any]] = [
        {"role": "assistant", "content": None},
        {"role": "tool", "content": "Sunny"},
        {"role": "developer", "content": "dropped"},
        {"role": "user"},
    ]
    assert data.convert_openai_messages_to_renderer_format(others, None, ByteRenderer()) == [
        {"role": "assistant", "content": ""},
        {"role": "tool", "content": "Sunny", "tool_call_id": "", "name": ""},
        {"role": "user", "content": ""},
    ]


def test_convert_makes_tool_calls_the_cookbooks_tool_calls() -> None:
    call = {"id": "c1", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    messages = [{"role": "assistant", "content": "", "tool_calls": [call]}]
    if importlib.util.find_spec("tinker_cookbook") is None:
        with pytest.raises(ImportError, match="tinker_cookbook is not installed"):
            data.convert_openai_messages_to_renderer_format(messages, None, ByteRenderer())
        return
    (converted,) = data.convert_openai_messages_to_renderer_format(messages, None, ByteRenderer())
    (tool_call,) = converted["tool_calls"]
    assert tool_call.id == "c1" and tool_call.function.name == "get_weather"
    assert json.loads(tool_call.function.arguments) == {"city": "Paris"}


def test_prefix_and_parse_are_the_renderers_own() -> None:
    prefix = data.create_conversation_prefix_with_tools(ByteRenderer(), [WEATHER], "Hi.")
    assert prefix == [{"role": "system", "content": "Hi. Tools: get_weather"}]
    parsed = data.parse_completion_to_openai_message(list(b"Sunny."), ByteRenderer())
    assert parsed == {"role": "assistant", "content": "Sunny."}


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: data.create_conversation_prefix_with_tools(None, []), "renderer must be"),
        (lambda: data.parse_completion_to_openai_message([1], object()), "no parse_response"),
        (lambda: data.parse_completion_to_openai_message([-1], ByteRenderer()), "token ids"),
        (
            lambda: data.history_to_datum(History(), 1.0, "qwen3", None),
            "got str \\(it has no build_generation_prompt\\)",
        ),
        (lambda: data.convert_openai_messages_to_renderer_format(NOT_A_LIST, None, None), "a list"),
        (
            lambda: data.convert_openai_messages_to_renderer_format(NOT_DICTS, None, None),
            r"messages\[0\] must be a chat message dict",
        ),
    ],
)
def test_bad_input_is_named(call: Any, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        call()


def test_history_to_datum_trains_the_last_choice_after_the_rendered_prompt() -> None:
    user = {"role": "user", "content": "Hi"}
    first = make_choice("A", token_ids=[65], logprobs=[-0.1])
    last = make_choice("B", token_ids=[66, 10], logprobs=[-0.5, -0.25])
    history = History(messages_and_choices=[user, first, user, last])
    datum = data.history_to_datum(history, 2.0, ByteRenderer(), None)
    prompt = list(b"User: Hi\nAssistant: A\nUser: Hi\nAssistant:")
    assert datum is not None
    assert datum.model_input.to_ints() == [*prompt, 66]
    inputs = datum.loss_fn_inputs
    p = len(prompt)
    assert inputs["target_tokens"].tolist() == [*prompt[1:], 66, 10]
    assert inputs["logprobs"].tolist() == [0.0] * (p - 1) + [-0.5, -0.25]
    assert inputs["advantages"].tolist() == [0.0] * (p - 1) + [2.0, 2.0]
    no_logprobs = History(messages_and_choices=[user, make_choice("A", logprobs=None)])
    assert data.history_to_datum(no_logprobs, 1.0, ByteRenderer(), None) is None
    assert (
        data.history_to_datum(History(messages_and_choices=[user]), 1.0, ByteRenderer(), None)
        is None
    )
