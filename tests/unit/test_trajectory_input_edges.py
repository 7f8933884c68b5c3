"""Edges of what users hand to trajectories, groups, metric rows and the checks of `log` and
`train` that mutation testing found unguarded: Choice-shaped dicts and models, the fields of a
group built from rollout awaitables, prompt ids of recorded calls, the refusals' wording, UTC
history times and which keys get running totals."""

from __future__ import annotations

import asyncio
import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from openai.types.chat import ChatCompletion
from pydantic import BaseModel, ValidationError

from arthex.core.capture import training_groups
from arthex.core.config import TrainConfig
from arthex.core.errors import InvalidInputError
from arthex.core.exchanges import ChatCompletionsExchange, TrajectoryExchanges
from arthex.core.metrics import MetricsRow, cumulative_key
from arthex.core.trajectories import INCOMPLETE_KEY, Trajectory, TrajectoryGroup, trajectory_group
from arthex.core.validation import check_finite_values, groups_from_log_input
from arthex.testing.builders import make_choice, make_trajectory

T0 = datetime(2026, 1, 1, tzinfo=UTC)
CHOICE_DICT: dict[str, Any] = {
    "finish_reason": "stop",
    "index": 0,
    "message": {"role": "assistant", "content": "4"},
    "logprobs": None,
}


class OtherClientChoice(BaseModel):
    """A Choice as another client library models it: the same fields, a different class."""

    finish_reason: str
    index: int
    message: dict[str, Any]
    logprobs: None = None


class NotAChoice:
    finish_reason = "stop"


# --- Choices given as dicts or other models -------------------------------------------------


def test_a_choice_read_back_as_a_dict_becomes_a_trainable_choice_again() -> None:
    trajectory = Trajectory(messages_and_choices=[{"role": "user", "content": "2+2?"}, CHOICE_DICT])
    [choice] = list(trajectory.choices())
    assert choice.message.content == "4"
    assert choice.finish_reason == "stop"
    assert trajectory.messages_and_choices[0] == {"role": "user", "content": "2+2?"}


def test_a_choice_dict_missing_a_field_is_refused_rather_than_kept_as_untrained_context() -> None:
    broken = {key: value for key, value in CHOICE_DICT.items() if key != "index"}
    with pytest.raises(ValidationError, match=r"messages_and_choices\.index\n  Field required"):
        Trajectory(messages_and_choices=[broken])


def test_a_dict_with_a_finish_reason_but_no_message_stays_a_context_message() -> None:
    item = {"role": "assistant", "content": "4", "finish_reason": "stop"}
    trajectory = Trajectory(messages_and_choices=[item])
    assert trajectory.messages_and_choices == [item]
    assert list(trajectory.choices()) == []


def test_a_choice_modelled_by_another_client_library_becomes_an_openai_choice() -> None:
    other = OtherClientChoice(**CHOICE_DICT)
    trajectory = Trajectory(messages_and_choices=[other])
    [choice] = list(trajectory.choices())
    assert choice.model_dump(exclude_none=True) == {
        "finish_reason": "stop",
        "index": 0,
        "message": {"role": "assistant", "content": "4"},
    }


def test_an_object_that_is_no_model_is_refused_by_its_type_name() -> None:
    with pytest.raises(TypeError, match=r"got NotAChoice$"):
        Trajectory(messages_and_choices=[NotAChoice()])


# --- groups built from rollout awaitables ----------------------------------------------------


async def rollout(reward: float) -> Trajectory:
    return make_trajectory(reward)


def test_a_group_of_rollouts_keeps_its_metrics_logs_and_given_exceptions_once_awaited() -> None:
    fields = ({"scenario": "s-1"}, {"turns": 3}, ["started"])

    async def scenario() -> TrajectoryGroup:
        group = TrajectoryGroup(
            [rollout(1.0)],
            exceptions=[ValueError("judge timed out")],
            metadata={"scenario": "s-1"},
            metrics={"turns": 3},
            logs=["started"],
        )
        assert (group.metadata, group.metrics, group.logs) == fields  # while still pending
        return await group

    after = asyncio.run(scenario())
    assert (after.metadata, after.metrics, after.logs) == fields
    assert [t.reward for t in after.trajectories] == [1.0]
    assert [(e.type, e.message) for e in after.exceptions] == [("ValueError", "judge timed out")]


def test_trajectory_group_names_the_type_of_an_item_that_is_no_rollout() -> None:
    with pytest.raises(TypeError) as raised:
        asyncio.run(trajectory_group([42]))  # type: ignore[list-item]
    assert str(raised.value) == (
        "trajectory_group takes rollout awaitables, Trajectory objects and exceptions, got int"
    )


def test_logging_an_unawaited_group_says_how_to_await_it() -> None:
    async def scenario() -> str:
        group = TrajectoryGroup([rollout(1.0)])
        try:
            groups_from_log_input(group)
        except InvalidInputError as error:
            message = str(error)
        else:
            raise AssertionError("an unawaited group was accepted")
        await group  # runs the rollout, so no coroutine is left unawaited
        return message

    assert asyncio.run(scenario()) == (
        "log got group 0 with rollouts not awaited yet; await it first (`await group`, or pass "
        "the groups to `await gather_trajectory_groups(...)`)"
    )


# --- captured calls: prompt ids --------------------------------------------------------------


def captured(choice: dict[str, Any], **response_extra: Any) -> Trajectory:
    response = ChatCompletion.model_validate(
        {
            "id": "c",
            "object": "chat.completion",
            "created": 0,
            "model": "agent@0",
            "choices": [choice],
            **response_extra,
        }
    )
    call = ChatCompletionsExchange(
        start_time=T0, end_time=T0 + timedelta(seconds=1), request={"model": "m"}, response=response
    )
    return Trajectory(exchanges=TrajectoryExchanges(chat_completions=[call]))


def test_a_choices_own_prompt_ids_win_over_the_responses() -> None:
    choice = make_choice("x", prompt_token_ids=[9, 9]).model_dump()
    trajectory = captured(choice, prompt_token_ids=[1, 2, 3])
    [found] = list(trajectory.choices())
    assert (found.model_extra or {})["prompt_token_ids"] == [9, 9]


def test_the_responses_prompt_ids_are_copied_onto_a_choice_without_its_own() -> None:
    trajectory = captured(dict(CHOICE_DICT), prompt_token_ids=[1, 2, 3])
    [found] = list(trajectory.choices())
    assert found.model_extra == {"prompt_token_ids": [1, 2, 3]}


def test_a_choice_of_a_response_without_prompt_ids_is_yielded_as_recorded() -> None:
    trajectory = captured(dict(CHOICE_DICT))
    [found] = list(trajectory.choices())
    assert found == trajectory.exchanges.chat_completions[0].response.choices[0]
    assert "prompt_token_ids" not in found.model_dump()


# --- train's view of groups with incomplete trajectories -------------------------------------


def test_leaving_out_an_incomplete_trajectory_keeps_the_groups_own_fields() -> None:
    crashed = make_trajectory(0.0, metadata={INCOMPLETE_KEY: True})
    done = make_trajectory(1.0)
    group = TrajectoryGroup(
        [done, crashed], metadata={"scenario": "s-1"}, metrics={"turns": 2}, logs=["retry"]
    )
    [trained] = training_groups([group], TrainConfig())
    assert trained.trajectories == [done]
    assert (trained.metadata, trained.metrics, trained.logs) == (
        {"scenario": "s-1"},
        {"turns": 2},
        ["retry"],
    )


# --- finite values ---------------------------------------------------------------------------


def test_an_unvalidated_nan_reward_is_refused_with_how_to_set_it() -> None:
    trajectory = make_trajectory(1.0).model_copy(update={"reward": math.nan})
    with pytest.raises(InvalidInputError) as raised:
        check_finite_values([TrajectoryGroup([trajectory])], training=False)
    assert str(raised.value) == (
        "group 0, trajectory 0 has reward nan; rewards must be finite numbers (a copy made with "
        "model_copy(update=...) or model_construct is not validated: build the Trajectory, or "
        "assign its reward, instead)"
    )


def test_a_choice_without_logprobs_has_no_logprob_to_refuse() -> None:
    trajectory = make_trajectory(1.0, choice=make_choice("4", logprobs=None))
    check_finite_values([TrajectoryGroup([trajectory])], training=True)


# --- metric rows -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"": 1.0}, "metric keys must be non-empty strings, got ''"),
        ({"step": 1.0}, "metric key 'step' is reserved for the row itself"),
        ({"train/x": "1"}, "metric 'train/x' must be a number, got '1'"),
        ({"train/x": [1.0]}, "metric 'train/x' must be a number, got [1.0]"),
    ],
)
def test_a_metric_row_refuses_a_bad_key_or_value_by_name(
    values: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidInputError) as raised:
        MetricsRow(step=0, values=values)
    assert str(raised.value) == message


@pytest.mark.usefixtures("india_clock")
def test_a_rows_recorded_time_is_written_in_utc_whatever_the_local_zone() -> None:
    aware = MetricsRow(step=0, values={}, recorded_at=T0 + timedelta(hours=12))
    naive = MetricsRow(step=0, values={}, recorded_at=datetime(2026, 1, 1, 12, 0))
    assert aware.to_json()["recorded_at"] == "2026-01-01T12:00:00+00:00"
    assert naive.to_json()["recorded_at"] == "2026-01-01T06:30:00+00:00"


@pytest.mark.parametrize("key", ["costs", "data", "train/step_reward", "loss/step_x", "data/cum/x"])
def test_only_per_step_counts_of_data_time_and_costs_get_running_totals(key: str) -> None:
    assert cumulative_key(key) is None
