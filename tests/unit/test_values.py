from __future__ import annotations

import asyncio
import io

import pytest
from openai.types.chat.chat_completion import Choice

from arthex.core.config import TrainConfig
from arthex.core.errors import InvalidInputError, InvalidNameError, TooManyExceptionsError
from arthex.core.gather import gather_trajectory_groups
from arthex.core.identity import RunRef, validate_name
from arthex.core.progress import ProgressLine
from arthex.core.trajectories import (
    CapturedException,
    Trajectory,
    TrajectoryGroup,
    trajectory_group,
)
from arthex.core.validation import check_training_groups, groups_from_log_input


@pytest.mark.parametrize(
    "bad", ["", "..", ".", "a/b", "a\\b", "a\x00b", "x" * 129, ".hidden", "-opt", "a b", "é", 3]
)
def test_unsafe_names_are_refused(bad: object) -> None:
    with pytest.raises(InvalidNameError):
        validate_name(bad, "name")


@pytest.mark.parametrize("good", ["agent-001", "v1.2", "_x", "A" * 128, "val"])
def test_safe_names_pass(good: str) -> None:
    assert validate_name(good) == good
    assert RunRef(good, good).inference_name(3) == f"{good}@3"


def test_run_ref_validates_on_construction() -> None:
    with pytest.raises(InvalidNameError, match="project"):
        RunRef("../etc", "x")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"learning_rate": 0.0},
        {"learning_rate": float("nan")},
        {"learning_rate": True},
        {"loss_fn": "dpo"},
        {"kl_penalty_coef": -1.0},
        {"grad_accumulation_sequences": 0},
        {"min_lr_multiplier": 5.0, "max_lr_multiplier": 2.0},
        {"kl_penalty_reference_step": -1},
    ],
)
def test_train_config_refuses_out_of_range_values(kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidInputError, match="TrainConfig"):
        TrainConfig(**kwargs)  # type: ignore[arg-type]


def test_train_config_clip_defaults() -> None:
    assert (TrainConfig().clip_low, TrainConfig().clip_high) == (1.0, 4.0)
    assert (TrainConfig(loss_fn="ppo").clip_low, TrainConfig(loss_fn="ppo").clip_high) == (0.2, 0.2)
    assert TrainConfig(loss_fn="ppo", epsilon_high=0.3).clip_high == 0.3


def test_trajectory_refuses_a_non_finite_reward() -> None:
    with pytest.raises(ValueError, match="finite"):
        Trajectory(reward=float("inf"))


def test_choice_shaped_dicts_become_choices() -> None:
    t = Trajectory(
        messages_and_choices=[
            {"role": "user", "content": "hi"},
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": "yo"},
                "token_ids": [1],
            },
        ]
    )
    assert isinstance(t.messages_and_choices[1], Choice)
    assert t.messages() == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "yo"},
    ]
    t.messages_and_choices.append({"role": "user", "content": "more"})
    assert len(list(t.choices())) == 1


def test_group_keeps_order_and_captures_qualified_exception_types() -> None:
    a, b = Trajectory(reward=1.0), Trajectory(reward=2.0)
    group = TrajectoryGroup([a, KeyError("k"), b], exceptions=[RuntimeError("late")])
    assert [t.reward for t in group] == [1.0, 2.0]
    assert [e.type for e in group.exceptions] == ["KeyError", "RuntimeError"]
    assert "KeyError" in group.exceptions[0].traceback or group.exceptions[0].message == "'k'"
    assert TrajectoryGroup(trajectories=[a]).trajectories == [a]
    legacy = CapturedException(type="<class 'ValueError'>", message="m")
    assert legacy.type == "ValueError"


def test_a_group_of_awaitables_is_refused_by_log_and_train_until_awaited() -> None:
    async def rollout() -> Trajectory:
        return Trajectory()

    pending = TrajectoryGroup([rollout()])
    assert pending.pending
    with pytest.raises(InvalidInputError, match="not awaited"):
        groups_from_log_input([pending])
    with pytest.raises(InvalidInputError, match="not awaited"):
        check_training_groups([pending], TrainConfig())
    done = asyncio.run(_await(pending))
    assert done is pending and len(done) == 1
    assert not done.pending


async def _await(group: TrajectoryGroup) -> TrajectoryGroup:
    return await group


def test_trajectory_group_awaits_concurrently_in_input_order() -> None:
    """Each rollout waits until all three have started: awaited one by one, the first would
    wait forever (the deadlock guard turns that into a failure). They finish in reverse order,
    and the group still keeps the input order."""
    started: list[int] = []
    finished: list[int] = []
    everyone_started = asyncio.Event()
    turn = [asyncio.Event() for _ in range(3)]

    async def rollout(index: int, reward: float) -> Trajectory:
        started.append(index)
        if len(started) == 3:
            everyone_started.set()
            turn[2].set()
        await everyone_started.wait()
        await turn[index].wait()  # finish last-to-first
        finished.append(index)
        if index > 0:
            turn[index - 1].set()
        if reward < 0:
            raise ValueError("bad rollout")
        return Trajectory(reward=reward)

    async def main() -> TrajectoryGroup:
        rollouts = [rollout(0, 1.0), rollout(1, -1), rollout(2, 3.0)]
        return await asyncio.wait_for(trajectory_group(rollouts), timeout=10)

    group = asyncio.run(main())
    assert started == [0, 1, 2]
    assert finished == [2, 1, 0]
    assert [t.reward for t in group] == [1.0, 3.0]
    assert group.exceptions[0].message == "bad rollout"


def _group(n_ok: int, n_bad: int) -> TrajectoryGroup:
    return TrajectoryGroup([Trajectory(reward=1.0)] * n_ok + [ValueError("x")] * n_bad)


async def _ready(group: TrajectoryGroup, delay: float = 0.0) -> TrajectoryGroup:
    await asyncio.sleep(delay)
    return group


def test_gather_keeps_order_and_counts_failures() -> None:
    async def failing() -> TrajectoryGroup:
        raise RuntimeError("scenario crashed")

    groups = asyncio.run(
        gather_trajectory_groups(
            [_ready(_group(2, 0), 0.01), failing(), _ready(_group(1, 1))], max_exceptions=2
        )
    )
    assert [len(g) for g in groups] == [2, 0, 1]
    assert groups[1].exceptions[0].type == "RuntimeError"


def test_gather_raises_past_the_budget() -> None:
    with pytest.raises(TooManyExceptionsError):
        asyncio.run(gather_trajectory_groups([_ready(_group(1, 1))]))
    with pytest.raises(TooManyExceptionsError):
        asyncio.run(gather_trajectory_groups([_ready(_group(1, 2))], max_exceptions=0.5))
    ok = asyncio.run(gather_trajectory_groups([_ready(_group(3, 1))], max_exceptions=0.25))
    assert len(ok) == 1
    with pytest.raises(InvalidInputError):
        asyncio.run(gather_trajectory_groups([], max_exceptions=-1))


def test_progress_line_is_silent_off_a_terminal_and_draws_on_request() -> None:
    quiet = io.StringIO()
    bar = ProgressLine("gather", 2, stream=quiet)
    bar.advance()
    assert quiet.getvalue() == ""
    loud = io.StringIO()
    bar = ProgressLine("gather", 2, stream=loud, enabled=True)
    bar.advance(1, 1)
    bar.close()
    assert "1/2" in loud.getvalue()
    assert "failed=1" in loud.getvalue()


def test_log_input_refuses_a_mix() -> None:
    with pytest.raises(InvalidInputError, match="mix"):
        groups_from_log_input([TrajectoryGroup([]), Trajectory()])
    assert groups_from_log_input(None) == []
    assert len(groups_from_log_input([Trajectory(), ValueError("x")])) == 1


def test_training_input_checks() -> None:
    config = TrainConfig()
    with pytest.raises(InvalidInputError, match="empty"):
        check_training_groups([], config)
    with pytest.raises(InvalidInputError, match="TrajectoryGroup"):
        check_training_groups([Trajectory()], config)
    no_choice = TrajectoryGroup(
        [Trajectory(messages_and_choices=[{"role": "user", "content": "q"}])]
    )
    with pytest.raises(InvalidInputError, match="Choice"):
        check_training_groups([no_choice], config)
    bare = Choice.model_validate(
        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "a"}}
    )
    without_logprobs = TrajectoryGroup([Trajectory(messages_and_choices=[bare])])
    with pytest.raises(InvalidInputError, match="group 0, trajectory 0, choice 0"):
        check_training_groups([without_logprobs], config)
    allowed = TrainConfig(allow_training_without_logprobs=True)
    assert check_training_groups([without_logprobs], allowed) == [without_logprobs]


def test_trajectory_group_takes_its_rollouts_at_the_call() -> None:
    async def rollout(topic: str) -> Trajectory:
        return Trajectory(metadata={"topic": topic})

    async def main() -> list[TrajectoryGroup]:
        pending = [trajectory_group(rollout(t) for _ in range(2)) for t in ("a", "b", "c")]
        return [await group for group in pending]

    groups = asyncio.run(main())
    assert [[t.metadata["topic"] for t in g] for g in groups] == [
        ["a", "a"],
        ["b", "b"],
        ["c", "c"],
    ]


def test_open_ended_progress_counts_without_a_bar() -> None:
    out = io.StringIO()
    bar = ProgressLine("train", None, stream=out, enabled=True)
    bar.advance(note="loss=0.5")
    bar.advance(note="loss=0.25")
    bar.close()
    assert "train 2" in out.getvalue()
    assert "loss=0.25" in out.getvalue()
    assert "/" not in out.getvalue().split("\r")[-1]
