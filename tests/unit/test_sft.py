"""Supervised fine-tuning's values and use case: config checks, the batch plan and schedule,
conversation validation, and the history rows an SFT call leaves (with the in-memory fakes)."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest

from arthex.core.conversations import conversation_from, conversations_from
from arthex.core.errors import InvalidInputError, UnsupportedCapability
from arthex.core.model import ModelPorts
from arthex.core.sft import TrainSFTConfig, create_lr_schedule, sft_key
from arthex.core.trainable import TrainableModel
from arthex.core.trajectories import Trajectory, TrajectoryGroup
from arthex.testing.builders import make_choice
from arthex.testing.fakes.backend import InMemoryBackend
from arthex.testing.fakes.history import InMemoryHistory
from arthex.testing.fakes.stores import InMemoryTrajectoryStore

QA = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]


# --- schedule and plan --------------------------------------------------------------------


def test_linear_schedule_with_warmup_matches_a_worked_example() -> None:
    # 6 steps, 2 warmup: (0+1)/2, (1+1)/2 of the peak, then 4 decay steps from 1.0 to 0.0
    assert create_lr_schedule(6, 1.0, "linear", warmup_steps=2) == pytest.approx(
        [0.5, 1.0, 1.0, 2 / 3, 1 / 3, 0.0]
    )


def test_cosine_schedule_runs_from_peak_to_floor() -> None:
    rates = create_lr_schedule(5, 2.0, "cosine", min_lr=0.5)
    expected = [0.5 + 1.5 * 0.5 * (1 + math.cos(math.pi * i / 4)) for i in range(5)]
    assert rates == pytest.approx(expected)
    assert rates[0] == 2.0 and rates[-1] == pytest.approx(0.5)


def test_constant_schedule_and_empty_schedule() -> None:
    assert create_lr_schedule(3, 0.1, "constant") == [0.1, 0.1, 0.1]
    assert create_lr_schedule(0, 0.1) == []


def test_plan_covers_every_conversation_once_per_epoch_in_batches() -> None:
    plan = TrainSFTConfig(batch_size=2, epochs=3, learning_rate=1e-3).plan(5)
    assert len(plan) == 9  # ceil(5/2) batches per epoch
    for epoch in range(3):
        items = [i for batch in plan if batch.epoch == epoch for i in batch.items]
        assert items == [0, 1, 2, 3, 4]  # no shuffle: the given order
    assert {batch.learning_rate for batch in plan} == {1e-3}


def test_shuffled_epochs_use_their_own_seed() -> None:
    import random

    plan = TrainSFTConfig(batch_size=10, epochs=2, shuffle=True, seed=7).plan(6)
    for epoch, batch in enumerate(plan):
        order = list(range(6))
        random.Random(7 + epoch).shuffle(order)
        assert list(batch.items) == order


def test_schedule_spans_all_batches_of_the_call() -> None:
    config = TrainSFTConfig(
        learning_rate=1.0, batch_size=1, epochs=2, lr_schedule="linear", warmup_ratio=0.25
    )
    rates = [batch.learning_rate for batch in config.plan(4)]
    assert rates == pytest.approx(create_lr_schedule(8, 1.0, "linear", warmup_steps=2))


def test_auto_batch_size_is_two() -> None:
    assert [len(b.items) for b in TrainSFTConfig().plan(5)] == [2, 2, 1]


def test_a_rate_per_batch_must_match_the_number_of_batches() -> None:
    config = TrainSFTConfig(learning_rate=[1e-3, 2e-3], batch_size=1)
    assert [b.learning_rate for b in config.plan(2)] == [1e-3, 2e-3]
    with pytest.raises(InvalidInputError, match="2 rates, but the call has 3 batches"):
        config.plan(3)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("learning_rate", 0.0),
        ("learning_rate", []),
        ("learning_rate", [1e-3, float("nan")]),
        ("batch_size", 0),
        ("batch_size", "big"),
        ("assistant_turns", "first"),
        ("epochs", 0),
        ("lr_schedule", "step"),
        ("warmup_ratio", 1.0),
        ("min_learning_rate", 1.0),
        ("max_grad_norm", -1.0),
        ("shuffle", "sometimes"),  # "yes" converts, as pydantic's lax mode does
    ],
)
def test_bad_config_values_are_refused_with_their_name(field: str, value: Any) -> None:
    with pytest.raises(InvalidInputError, match=field):
        TrainSFTConfig(**{field: value})


def test_a_rate_list_with_a_schedule_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="already a schedule"):
        TrainSFTConfig(learning_rate=[1e-3], lr_schedule="cosine")


def test_config_round_trips_through_json() -> None:
    config = TrainSFTConfig(learning_rate=[1e-3, 2e-3], batch_size=3, assistant_turns="last")
    assert TrainSFTConfig.from_json(config.to_json()) == config
    with pytest.raises(InvalidInputError, match="unexpected keyword"):
        TrainSFTConfig.from_json({"learning_rte": 1e-3})


# --- conversations ------------------------------------------------------------------------


def test_records_message_lists_and_trajectories_become_conversations() -> None:
    choice = make_choice("hello", token_ids=[1, 2])
    trajectory = Trajectory(messages_and_choices=[QA[0], choice], tools=[{"type": "function"}])
    items: list[object] = [{"messages": QA}, QA, trajectory]
    conversations = conversations_from(items)
    assert [c.messages[-1]["content"] for c in conversations] == ["hello"] * 3
    assert conversations[2].tools == ({"type": "function"},)
    assert all(c.trained_turns() == [1] for c in conversations)


def test_weight_zero_makes_an_assistant_turn_context_only() -> None:
    messages = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b", "weight": 0},
        {"role": "user", "content": "c"},
        {"role": "assistant", "content": "d", "weight": 1},
        {"role": "user", "content": "e"},
        {"role": "assistant", "content": "f"},
    ]
    conversation = conversation_from({"messages": messages})
    assert conversation.trained_turns("all") == [3, 5]
    assert conversation.trained_turns("last") == [5]
    assert all("weight" not in m for m in conversation.messages)
    assert conversation.to_json()["messages"][1]["weight"] == 0
    assert conversation_from(conversation.to_json()).trained_turns() == [3, 5]


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"messages": []}, "non-empty list"),
        ({"mesages": QA}, "unknown key"),
        ({"messages": [{"role": "bot", "content": "x"}, QA[1]]}, "message 0: role 'bot'"),
        ({"messages": [QA[0], {"role": "assistant"}]}, "message 1: 'content' is missing"),
        ({"messages": [QA[0], {**QA[1], "weight": 2}]}, "message 1: 'weight' must be 0 or 1"),
        ({"messages": [QA[0]]}, "no assistant message to train on"),
        ({"messages": [QA[1], QA[0], QA[1]]}, "nothing comes before"),
        (
            {"messages": [QA[0], {"role": "assistant", "content": [{"type": "image_url"}]}]},
            "content part 0 is 'image_url'",
        ),
        (
            {"messages": [QA[0], {"role": "assistant", "content": None, "tool_calls": [{}]}]},
            "tool call 0 needs a 'function'",
        ),
        ({"messages": QA, "tools": "search"}, "'tools' must be a list"),
    ],
)
def test_bad_records_are_refused_naming_what_is_wrong(record: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        conversation_from(record, "line 7")
    with pytest.raises(InvalidInputError, match="line 7"):
        conversation_from(record, "line 7")


def test_tool_call_replies_train_without_content() -> None:
    call = {"type": "function", "function": {"name": "add", "arguments": '{"a": 1}'}}
    conversation = conversation_from(
        [QA[0], {"role": "assistant", "content": None, "tool_calls": [call]}]
    )
    assert conversation.trained_turns() == [1]


def test_trajectory_groups_count_as_their_trajectories() -> None:
    group = TrajectoryGroup(
        [Trajectory(messages_and_choices=QA), Trajectory(messages_and_choices=QA)]
    )
    assert len(conversations_from([group, QA])) == 3
    assert len(conversations_from(group)) == 2
    bad = TrajectoryGroup([Trajectory(messages_and_choices=QA[:1])])
    with pytest.raises(InvalidInputError, match="item 0, trajectory 0: no assistant message"):
        conversations_from([bad])


def test_train_sft_input_must_be_a_non_empty_list() -> None:
    with pytest.raises(InvalidInputError, match="no conversations"):
        conversations_from([])
    with pytest.raises(InvalidInputError, match="list of trajectories or conversations"):
        conversations_from({"messages": QA})
    with pytest.raises(InvalidInputError, match="item 1"):
        conversations_from([QA, 42])


def test_sft_keys_follow_arts_sft_split_rule() -> None:
    assert sft_key("loss/train") == "sft/loss/train"
    assert sft_key("sft/gradient_step") == "sft/gradient_step"
    assert sft_key("grad_norm") == "sft/grad_norm"


# --- the use case ------------------------------------------------------------------------


def _model(backend: InMemoryBackend, history: InMemoryHistory) -> TrainableModel:
    model = TrainableModel(
        name="m",
        project="p",
        base_model="fake",
        ports=ModelPorts(store=InMemoryTrajectoryStore(), reporter=history),
    )
    asyncio.run(model.register(backend))
    return model


def test_an_sft_call_is_one_step_with_a_row_per_gradient_step_and_a_training_row() -> None:
    history = InMemoryHistory()
    model = _model(InMemoryBackend(), history)
    data = [QA, [{"role": "user", "content": "x"}, {"role": "assistant", "content": "yz"}]]
    result = asyncio.run(model.train_sft(data, TrainSFTConfig(batch_size=1, epochs=2)))
    assert result.step == 1
    rows = asyncio.run(history.rows(model.run))
    assert [row.step for row in rows] == [1, 1, 1, 1, 1]
    sft = rows[:4]
    assert [row.values["sft/gradient_step"] for row in sft] == [1.0, 2.0, 3.0, 4.0]
    for row in sft:
        assert {"sft/loss/train", "sft/loss/learning_rate", "sft/data/step_num_gradient_steps"} <= (
            set(row.values)
        )
        assert not any(key.startswith("loss/") for key in row.values)
    summary = rows[4].values
    losses = [float(row.values["sft/loss/train"] or 0.0) for row in sft]
    assert summary["loss/train"] == pytest.approx(sum(losses) / 4)
    assert summary["data/step_num_gradient_steps"] == 4.0
    assert summary["time/step_backend_train_s"] is not None
    assert result.metrics == summary
    assert asyncio.run(model.get_step()) == 1


def test_sft_on_a_backend_without_it_is_refused_before_anything_is_written() -> None:
    history = InMemoryHistory()
    model = _model(InMemoryBackend(sft=False), history)
    with pytest.raises(UnsupportedCapability, match="'sft'"):
        asyncio.run(model.train_sft([QA]))
    assert asyncio.run(history.rows(model.run)) == []
    assert asyncio.run(model.get_step()) == 0


def test_a_wrong_rate_list_is_refused_before_the_backend_is_asked() -> None:
    history = InMemoryHistory()
    model = _model(InMemoryBackend(), history)
    with pytest.raises(InvalidInputError, match="one rate per batch"):
        asyncio.run(model.train_sft([QA, QA, QA], TrainSFTConfig(learning_rate=[1e-3])))
    assert asyncio.run(history.rows(model.run)) == []
