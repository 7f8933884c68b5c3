"""What `log` and `train` say when handed the wrong thing: each error names what was passed
and what to do instead, before anything is written."""

from __future__ import annotations

import asyncio

import pytest

import arthex as art
from arthex.core.config import TrainConfig
from arthex.core.errors import InvalidInputError
from arthex.core.validation import check_training_groups, groups_from_log_input
from arthex.testing.builders import make_choice, make_group, make_trajectory


async def _rollout(reward: float) -> art.Trajectory:
    return make_trajectory(reward)


def _pending_group() -> art.TrajectoryGroup:
    return art.TrajectoryGroup([_rollout(0.0), _rollout(1.0)])


def _finish(group: art.TrajectoryGroup) -> None:
    """Await the rollouts a test left pending, so none is dropped unawaited."""

    async def resolve() -> None:
        await group

    asyncio.run(resolve())


def test_log_takes_one_finished_group_as_a_batch_of_that_group() -> None:
    group = make_group((0.0, 1.0))
    assert groups_from_log_input(group) == [group]


@pytest.mark.parametrize("as_list", [False, True], ids=["a group", "a list of groups"])
def test_log_refuses_a_group_whose_rollouts_were_not_awaited_naming_log(as_list: bool) -> None:
    pending = _pending_group()
    with pytest.raises(InvalidInputError) as raised:
        groups_from_log_input([make_group(), pending] if as_list else pending)
    index = 1 if as_list else 0
    assert str(raised.value).startswith(f"log got group {index} with rollouts not awaited yet")
    _finish(pending)


def test_train_refuses_a_group_whose_rollouts_were_not_awaited_naming_train() -> None:
    pending = _pending_group()
    with pytest.raises(InvalidInputError) as raised:
        check_training_groups([pending], TrainConfig())
    assert str(raised.value).startswith("train got group 0 with rollouts not awaited yet")
    _finish(pending)


def test_log_refuses_a_value_that_is_not_a_list_naming_its_type() -> None:
    with pytest.raises(
        InvalidInputError, match=r"list of TrajectoryGroup or of Trajectory, got int"
    ):
        groups_from_log_input(42)


def test_log_refuses_a_mix_of_groups_and_trajectories_naming_both_kinds() -> None:
    with pytest.raises(InvalidInputError) as raised:
        groups_from_log_input([make_group(), make_trajectory(1.0)])
    assert str(raised.value) == (
        "trajectories must be all TrajectoryGroup or all Trajectory (exceptions allowed with "
        "trajectories), not a mix: got Trajectory, TrajectoryGroup"
    )


def test_train_refuses_a_single_group_asking_for_a_list() -> None:
    with pytest.raises(InvalidInputError) as raised:
        check_training_groups(make_group(), TrainConfig())
    assert str(raised.value) == "train takes a list of TrajectoryGroup"


def test_train_refuses_an_empty_list_saying_there_is_nothing_to_train_on() -> None:
    with pytest.raises(InvalidInputError) as raised:
        check_training_groups([], TrainConfig())
    assert str(raised.value) == "train got an empty list of groups: there is nothing to train on"


def test_train_refuses_a_bare_trajectory_naming_its_place_and_the_wrapping_to_do() -> None:
    with pytest.raises(InvalidInputError) as raised:
        check_training_groups([make_group(), make_trajectory(1.0)], TrainConfig())
    assert str(raised.value) == (
        "train takes TrajectoryGroup items only; item 1 is Trajectory "
        "(wrap trajectories of one scenario in a TrajectoryGroup)"
    )


def test_train_refuses_a_choice_without_logprobs_naming_both_ways_out() -> None:
    no_logprobs = make_trajectory(1.0, choice=make_choice("4", logprobs=None))
    group = art.TrajectoryGroup([make_trajectory(0.0), no_logprobs])
    with pytest.raises(InvalidInputError) as raised:
        check_training_groups([group], TrainConfig())
    assert str(raised.value) == (
        "group 0, trajectory 1, choice 0 has no token logprobs (arthex's servers return them "
        "unless a request says logprobs=False); sample without logprobs=False, or set "
        "allow_training_without_logprobs"
    )


def test_train_refuses_groups_without_any_choice_saying_to_append_the_choice() -> None:
    as_dict = make_trajectory(
        1.0,
        messages=[
            {"role": "user", "content": "What is 2 + 2?"},
            {"role": "assistant", "content": "4"},
        ],
    )
    with pytest.raises(InvalidInputError) as raised:
        check_training_groups([art.TrajectoryGroup([as_dict])], TrainConfig())
    assert str(raised.value) == (
        "no trajectory holds a Choice: only Choice objects returned by the model are trained; "
        "append the response's choices[0], not a dict copy of its message"
    )
