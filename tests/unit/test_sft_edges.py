"""Edges of supervised fine-tuning that mutation testing found unguarded: schedule corners worked
by hand, the exact messages a refused config or record gives, and records kept apart from
their caller's objects."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from arthex.core.conversations import conversation_from, conversations_from
from arthex.core.errors import InvalidInputError, UnsupportedCapability
from arthex.core.fine_tuning import collect_updates
from arthex.core.identity import RunRef
from arthex.core.sft import TrainSFTConfig, create_lr_schedule, sft_key
from arthex.ports.training_backend import supervised

USER = {"role": "user", "content": "hi"}
REPLY = {"role": "assistant", "content": "hello"}
CALL = {"type": "function", "function": {"name": "add", "arguments": '{"a": 1}'}}


def refusal(call: Callable[..., object], *args: object, **options: object) -> str:
    with pytest.raises(InvalidInputError) as caught:
        call(*args, **options)
    return str(caught.value)


# --- the schedule ---------------------------------------------------------------------------


def test_warmup_rises_from_the_floor_and_one_decay_step_stays_at_the_peak() -> None:
    # 4 steps, 2 of warmup from 1.0 to 3.0: 2.0, 3.0; then 2 decay steps from 3.0 to 1.0.
    assert create_lr_schedule(4, 3.0, "linear", warmup_steps=2, min_lr=1.0) == pytest.approx(
        [2.0, 3.0, 3.0, 1.0]
    )
    # A single decay step is the peak (nothing to decay over), with or without a floor.
    assert create_lr_schedule(1, 3.0, "linear", min_lr=1.0) == [3.0]
    assert create_lr_schedule(3, 3.0, "cosine", warmup_steps=2, min_lr=1.0) == pytest.approx(
        [2.0, 3.0, 3.0]
    )
    # Two decay steps: the peak, then the floor.
    assert create_lr_schedule(2, 3.0, "linear") == [3.0, 0.0]


def test_an_unknown_schedule_is_refused_naming_it() -> None:
    message = refusal(lambda: create_lr_schedule(3, 1.0, "step"))  # type: ignore[arg-type]
    assert message == (
        "schedule method must be one of ('constant', 'linear', 'cosine'), got 'step'"
    )


def test_the_schedule_covers_the_batches_of_one_conversation_and_of_an_odd_count() -> None:
    config = TrainSFTConfig(learning_rate=2.0, batch_size=2, lr_schedule="linear")
    assert [b.learning_rate for b in config.plan(1)] == [2.0]
    # 3 conversations in batches of 2: two batches, decaying from the peak to 0.
    assert [(b.items, b.learning_rate) for b in config.plan(3)] == [((0, 1), 2.0), ((2,), 0.0)]


def test_a_wrong_rate_list_names_the_counts_that_decide_the_batches() -> None:
    config = TrainSFTConfig(learning_rate=[1e-3], batch_size=1, epochs=2)
    assert refusal(lambda: config.plan(3)) == (
        "TrainSFTConfig.learning_rate lists 1 rates, but the call has 6 batches "
        "(3 conversations, batch_size 1, 2 epoch(s)); give one rate per batch"
    )


# --- the config -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"learning_rate": []}, "TrainSFTConfig.learning_rate: the list of rates is empty"),
        (
            {"learning_rate": [1e-3], "warmup_ratio": 0.5},
            "TrainSFTConfig: a list of learning rates is already a schedule; leave "
            "lr_schedule='constant' and warmup_ratio=0, or pass one peak rate",
        ),
        ({"learning_rate": -1}, "TrainSFTConfig.learning_rate must be a finite number > 0, got -1"),
        (  # a rate of 0 in a list is a schedule's end (ART's linear and cosine end there)
            {"learning_rate": [1e-3, -1e-3]},
            "TrainSFTConfig.learning_rate[1] must be a finite number >= 0, got -0.001",
        ),
        ({"max_grad_norm": 0}, "TrainSFTConfig.max_grad_norm must be a finite number > 0, got 0"),
        ({"batch_size": 0}, "TrainSFTConfig.batch_size must be an integer >= 1, got 0"),
        ({"batch_size": True}, "TrainSFTConfig.batch_size must be an integer >= 1, got True"),
        (
            {"assistant_turns": "first"},
            "TrainSFTConfig.assistant_turns must be one of ('all', 'last'), got 'first'",
        ),
        ({"warmup_ratio": "x"}, "TrainSFTConfig.warmup_ratio must be a number in [0, 1), got 'x'"),
        (
            {"warmup_ratio": True},
            "TrainSFTConfig.warmup_ratio must be a number in [0, 1), got True",
        ),
        (
            {"min_learning_rate": "x"},
            "TrainSFTConfig.min_learning_rate must be a finite number >= 0, got 'x'",
        ),
        (
            {"min_learning_rate": True},
            "TrainSFTConfig.min_learning_rate must be a finite number >= 0, got True",
        ),
        (
            {"min_learning_rate": float("inf")},
            "TrainSFTConfig.min_learning_rate must be a finite number >= 0, got inf",
        ),
        (
            {"min_learning_rate": -0.5},
            "TrainSFTConfig.min_learning_rate must be in [0, learning_rate], got -0.5",
        ),
    ],
)
def test_a_bad_config_gives_its_whole_message(options: dict[str, Any], message: str) -> None:
    assert refusal(lambda: TrainSFTConfig(**options)) == message


def test_the_floor_may_equal_the_peak_and_a_rate_list_takes_any_floor() -> None:
    assert TrainSFTConfig(learning_rate=1e-3, min_learning_rate=1e-3).min_learning_rate == 1e-3
    assert TrainSFTConfig(learning_rate=[1e-3], min_learning_rate=1.0).min_learning_rate == 1.0


def test_a_config_that_is_not_an_object_is_refused_naming_its_type() -> None:
    assert refusal(lambda: TrainSFTConfig.from_json([1])) == (
        "the SFT config must be a JSON object, got list"
    )
    assert TrainSFTConfig.from_json(None) == TrainSFTConfig()


# --- the backend ----------------------------------------------------------------------------


class ClaimsSft:
    """Says it offers SFT but has no `train_sft`."""

    capabilities = frozenset({"sft"})


def test_a_backend_that_claims_sft_without_the_method_is_refused_naming_it() -> None:
    with pytest.raises(UnsupportedCapability) as caught:
        supervised(ClaimsSft())
    assert str(caught.value) == (
        "ClaimsSft does not support 'sft'. Supervised fine-tuning needs a backend that offers "
        "it (LocalBackend, TinkerBackend, or a ServerlessBackend whose server does)"
    )


class Scripted:
    def __init__(self, samples: list[dict[str, float]]) -> None:
        self.samples = samples

    async def train_sft(self, *_: object) -> AsyncIterator[dict[str, float]]:
        for sample in self.samples:
            yield sample


def test_the_progress_line_shows_each_gradient_steps_loss(
    capsys: pytest.CaptureFixture[str],
) -> None:
    backend = Scripted([{"loss/train": 0.123456}, {"loss/grad_norm": 1.0}])
    samples = asyncio.run(
        collect_updates(
            backend,
            RunRef("p", "m"),
            [],
            TrainSFTConfig(),
            description="sft 0 -> 1",
            progress=True,
        )
    )
    assert samples == backend.samples
    first, second = capsys.readouterr().err.split("\r")[1:]
    assert first.startswith("sft 0 -> 1 1 ") and first.endswith("s loss=0.1235")
    assert second.startswith("sft 0 -> 1 2 ") and second.endswith("s\n")  # no loss, no note


def test_keys_already_under_sft_keep_their_name_however_deep() -> None:
    assert sft_key("sft/loss/train") == "sft/loss/train"
    assert sft_key("sftx/loss") == "sft/sftx/loss"


# --- conversations --------------------------------------------------------------------------


def test_the_last_turn_is_only_the_last_of_several() -> None:
    messages = [USER, REPLY, USER, REPLY, USER, REPLY]
    conversation = conversation_from(messages)
    assert conversation.trained_turns("last") == [5]
    assert conversation.trained_turns() == [1, 3, 5]


def test_a_context_reply_may_open_the_conversation() -> None:
    opening = {**REPLY, "weight": 0}
    assert conversation_from([opening, USER, REPLY]).trained_turns() == [2]


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        ([USER, {**REPLY, "weight": True}], "message 1: 'weight' must be 0 or 1 and only on "
         "assistant messages, got True on a assistant message"),
        ([{**USER, "weight": 1}, REPLY], "message 0: 'weight' must be 0 or 1 and only on "
         "assistant messages, got 1 on a user message"),
    ],
)  # fmt: skip
def test_weight_is_a_number_on_assistant_messages_only(
    messages: list[dict[str, Any]], message: str
) -> None:
    assert refusal(lambda: conversation_from(messages, "line 3")) == f"line 3, {message}"


def test_text_parts_are_accepted_and_anything_else_is_named() -> None:
    parts = [{"type": "text", "text": "hel"}, {"type": "text", "text": "lo"}]
    assert conversation_from([USER, {**REPLY, "content": parts}]).messages[1]["content"] == parts
    where = "line 3, message 1"
    cases: list[tuple[object, str]] = [
        (["hello"], f"{where}: content part 0 is 'str'"),
        ([{"type": "text", "text": 5}], f"{where}: content part 0 is 'text'"),
        ([parts[0], {"text": "x"}], f"{where}: content part 1 is None"),
        ([{"type": "image_url", "text": "x"}], f"{where}: content part 0 is 'image_url'"),
    ]
    for content, start in cases:
        message = refusal(conversation_from, [USER, {**REPLY, "content": content}], "line 3")
        assert message == (
            start + "; fine-tuning takes text parts ({'type': 'text', 'text': ...}) only"
        )
    assert refusal(lambda: conversation_from([USER, {**REPLY, "content": 42}], "line 3")) == (
        f"{where}: 'content' must be a string or a list of text parts, got int"
    )


def test_bad_tool_calls_are_named_with_the_form_they_need() -> None:
    where = "line 3, message 1"
    needs = (
        " needs a 'function' with a 'name' (OpenAI's {'type': 'function', 'function': "
        "{'name': ..., 'arguments': ...}})"
    )
    cases: list[tuple[object, str]] = [
        ("add", f"{where}: 'tool_calls' must be a list"),
        (["add"], f"{where}: tool call 0{needs}"),
        ([CALL, {"function": {"arguments": "{}"}}], f"{where}: tool call 1{needs}"),
        (
            [{"function": {"name": "add"}}],
            f"{where}: tool call 0 ('add') needs 'arguments' as a JSON string or an object",
        ),
    ]
    for calls, message in cases:
        reply = {"role": "assistant", "content": None, "tool_calls": calls}
        assert refusal(conversation_from, [USER, reply], "line 3") == message
    arguments_object = {"function": {"name": "add", "arguments": {"a": 1}}}
    reply = {"role": "assistant", "content": None, "tool_calls": [arguments_object]}
    assert conversation_from([USER, reply]).trained_turns() == [1]


@pytest.mark.parametrize(
    ("item", "message"),
    [
        (
            {"messages": [USER, REPLY], "mesages": []},
            "line 3: unknown key(s) ['mesages']; a record holds 'messages' and optionally "
            "'tools' (the OpenAI fine-tuning format)",
        ),
        ({"tools": []}, "line 3: the record has no 'messages'"),
        (
            42,
            "line 3: expected a Trajectory, a {'messages': [...]} record or a list of messages, "
            "got int",
        ),
        ([USER, 7], "line 3, message 1: expected an object, got int"),
        (
            [{"role": "user"}, REPLY],
            "line 3, message 0: 'content' is missing (a user message needs it)",
        ),
        (
            [REPLY, USER, REPLY],
            "line 3: message 0 is an assistant message to train on, but nothing comes before "
            "it; put its prompt (a user or system message) first, or give it weight 0",
        ),
        (
            [USER, {**REPLY, "weight": 0}],
            "line 3: no assistant message to train on (SFT learns the assistant's replies; "
            "messages with weight 0 are context only)",
        ),
        (
            {"messages": [USER, REPLY], "tools": [1]},
            "line 3: 'tools' must be a list of tool specs (objects)",
        ),
    ],
)
def test_a_bad_record_gives_its_whole_message(item: object, message: str) -> None:
    assert refusal(lambda: conversation_from(item, "line 3")) == message


def test_a_conversation_keeps_its_own_copy_of_nested_content_and_tools() -> None:
    parts = [{"type": "text", "text": "hello"}]
    tool = {"type": "function", "function": {"name": "add", "parameters": {"a": "int"}}}
    conversation = conversation_from(
        {"messages": [USER, {**REPLY, "content": parts}], "tools": [tool]}
    )
    parts[0]["text"] = "changed"
    tool["function"]["name"] = "changed"  # type: ignore[index]
    assert conversation.messages[1]["content"] == [{"type": "text", "text": "hello"}]
    assert conversation.tools is not None
    assert conversation.tools[0]["function"]["name"] == "add"


@pytest.mark.parametrize(
    ("items", "message"),
    [
        ({"messages": [USER, REPLY]}, "got dict"),
        ("chat.jsonl", "got str"),
        (None, "got NoneType"),
    ],
)
def test_train_sft_names_the_type_it_was_given(items: object, message: str) -> None:
    assert refusal(lambda: conversations_from(items)) == (
        f"train_sft takes a list of trajectories or conversations, {message}"
    )


def test_an_empty_list_of_conversations_gives_its_whole_message() -> None:
    assert refusal(lambda: conversations_from([])) == (
        "train_sft got no conversations: there is nothing to train on"
    )
    assert refusal(lambda: TrainSFTConfig().plan(0)) == (
        "train_sft got no conversations: there is nothing to train on"
    )
