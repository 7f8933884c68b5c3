"""SFT targets: exactly the tokens the chat template adds for each trained assistant reply."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from arthex.adapters.inference.chat import ChatTokenizer
from arthex.adapters.inference.sft_tokens import conversation_sequences, tokenize_conversations
from arthex.core.conversations import conversation_from
from arthex.core.errors import InvalidInputError
from arthex.testing.tiny_model import tiny_model

TWO_TURNS = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hello!"},
    {"role": "assistant", "content": "Hi."},
    {"role": "user", "content": "What is two plus two?"},
    {"role": "assistant", "content": "four"},
]


@pytest.fixture(scope="module")
def chat(tmp_path_factory: pytest.TempPathFactory) -> ChatTokenizer:
    return ChatTokenizer.load(tiny_model(tmp_path_factory.getbasetemp() / "tiny"))


def _target_text(chat: ChatTokenizer, tokens: tuple[int, ...], targets: tuple[bool, ...]) -> str:
    """The targets as text, each contiguous run on its own line."""
    runs: list[list[int]] = []
    for index, (token, target) in enumerate(zip(tokens, targets, strict=True)):
        if target:
            if index == 0 or not targets[index - 1]:
                runs.append([])
            runs[-1].append(token)
    return "|".join(chat.decode_raw(run) for run in runs)


def test_targets_are_each_reply_with_its_end_of_turn(chat: ChatTokenizer) -> None:
    (sequence,) = conversation_sequences(chat, conversation_from(TWO_TURNS), "all", "c")
    assert list(sequence.tokens) == chat.render(TWO_TURNS, None, add_generation_prompt=False)
    # the tiny template ends a turn with "<|eos|>\n" (testing/tiny_model.py)
    assert _target_text(chat, sequence.tokens, sequence.targets) == "Hi.<|eos|>\n|four<|eos|>\n"
    assert not sequence.targets[0]


def test_last_turn_only_and_weight_zero_leave_earlier_replies_as_context(
    chat: ChatTokenizer,
) -> None:
    (last,) = conversation_sequences(chat, conversation_from(TWO_TURNS), "last", "c")
    assert _target_text(chat, last.tokens, last.targets) == "four<|eos|>\n"
    weighted: list[dict[str, object]] = [dict(m) for m in TWO_TURNS]
    weighted[2]["weight"] = 0
    (sequence,) = conversation_sequences(chat, conversation_from(weighted), "all", "c")
    assert _target_text(chat, sequence.tokens, sequence.targets) == "four<|eos|>\n"


def test_a_template_that_rewrites_earlier_turns_gets_one_sequence_per_turn(
    tmp_path: Path,
) -> None:
    model = Path(tiny_model(tmp_path / "tiny"))
    rewriting = tmp_path / "rewriting"
    shutil.copytree(model, rewriting)
    template = (rewriting / "chat_template.jinja").read_text()
    # past assistant replies are shortened once a later message follows (as templates that
    # drop past reasoning do)
    template = template.replace(
        "{% if message.get('content') is string %}{{ message['content'] }}",
        "{% if message['role'] == 'assistant' and not loop.last %}(earlier)"
        "{% elif message.get('content') is string %}{{ message['content'] }}",
    )
    (rewriting / "chat_template.jinja").write_text(template)
    chat = ChatTokenizer.load(str(rewriting))
    first, second = conversation_sequences(chat, conversation_from(TWO_TURNS), "all", "c")
    assert _target_text(chat, first.tokens, first.targets) == "Hi.<|eos|>\n"
    assert _target_text(chat, second.tokens, second.targets) == "four<|eos|>\n"
    assert "(earlier)" in chat.decode_raw(list(second.tokens))


def test_too_long_conversations_are_dropped_and_none_left_is_an_error(
    chat: ChatTokenizer,
) -> None:
    short = conversation_from(TWO_TURNS[1:3])
    long = conversation_from(
        [{"role": "user", "content": "count " * 300}, {"role": "assistant", "content": "ok"}]
    )
    data = tokenize_conversations(chat, [short, long], "all", max_length=64)
    assert data.dropped == 1
    assert data.sequences[1] is None and data.sequences[0] is not None
    with pytest.raises(InvalidInputError, match="1 of 1 are longer than the model's 64 tokens"):
        tokenize_conversations(chat, [long], "all", max_length=64)


def test_tools_are_rendered_into_the_prompt(chat: ChatTokenizer) -> None:
    tool = {"type": "function", "function": {"name": "add"}}
    record = {"messages": TWO_TURNS[1:3], "tools": [tool]}
    (sequence,) = conversation_sequences(chat, conversation_from(record), "all", "c")
    assert json.dumps(tool) in chat.decode_raw(list(sequence.tokens))
