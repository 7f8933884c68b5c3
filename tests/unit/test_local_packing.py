"""Packing trajectories into training rows: token ids, masks, advantages, weights, errors."""

from __future__ import annotations

import math
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from openai.types.chat import ChatCompletionMessage, ChatCompletionTokenLogprob  # noqa: E402
from openai.types.chat.chat_completion import Choice, ChoiceLogprobs  # noqa: E402

from arthex.adapters.local.packing import build_sequences, pack  # noqa: E402
from arthex.core.config import TrainConfig  # noqa: E402
from arthex.core.errors import InvalidInputError  # noqa: E402
from arthex.core.trajectories import History, Trajectory, TrajectoryGroup  # noqa: E402

PAD = 0


def choice(
    prompt: list[int] | None,
    tokens: list[int] | None,
    logprobs: list[float] | None = None,
    *,
    with_logprobs: bool = True,
) -> Choice:
    extra: dict[str, Any] = {}
    if prompt is not None:
        extra["prompt_token_ids"] = prompt
    if tokens is not None:
        extra["token_ids"] = tokens
    values = logprobs if logprobs is not None else [-1.0] * len(tokens or [])
    content = [
        ChatCompletionTokenLogprob(token=f"token_id:{i}", logprob=v, bytes=None, top_logprobs=[])
        for i, v in enumerate(values)
    ]
    return Choice(
        finish_reason="stop",
        index=0,
        message=ChatCompletionMessage(role="assistant", content="x"),
        logprobs=ChoiceLogprobs(content=content) if with_logprobs else None,
        **extra,
    )


def traj(*items: Any, reward: float, histories: list[History] | None = None) -> Trajectory:
    return Trajectory(
        messages_and_choices=[{"role": "user", "content": "q"}, *items],
        reward=reward,
        additional_histories=histories or [],
    )


NO_SCALE = TrainConfig(scale_rewards=False)


def test_rows_hold_prompt_then_completion_with_mask_logprobs_and_advantage() -> None:
    group = TrajectoryGroup(
        [
            traj(choice([5, 6, 7], [8, 9], [-0.5, -0.25]), reward=1.0),
            traj(choice([5, 6, 7], [10], [-2.0]), reward=0.0),
        ]
    )
    batch = pack([group], NO_SCALE, max_length=1024, pad_token_id=PAD)
    assert batch.num_rows == 2
    assert batch.seq_len == 128  # smallest multiple of 128 holding 5 tokens
    assert batch.tokens[0, :6].tolist() == [5, 6, 7, 8, 9, PAD]
    assert batch.mask[0, :6].tolist() == [False, False, False, True, True, False]
    assert batch.tokens[1, :5].tolist() == [5, 6, 7, 10, PAD]
    old = batch.old_logprobs[0, :6].tolist()
    assert all(math.isnan(v) for v in old[:3]) and math.isnan(old[5])
    assert old[3:5] == [-0.5, -0.25]
    # A = r - mean without scaling; zero outside the mask.
    assert batch.advantages[0, :6].tolist() == [0, 0, 0, 0.5, 0.5, 0]
    assert batch.advantages[1, :5].tolist() == [0, 0, 0, -0.5, 0]
    assert batch.segment_ids[0, :6].tolist() == [0, 0, 0, 0, 0, -1]
    assert batch.position_ids[1, :4].tolist() == [0, 1, 2, 3]
    assert batch.num_trainable_tokens == 3
    assert batch.num_groups == 1 and batch.num_groups_trainable == 1


def test_scaled_advantages_divide_by_group_std() -> None:
    group = TrajectoryGroup(
        [traj(choice([1], [2]), reward=1.0), traj(choice([1], [3]), reward=0.0)]
    )
    batch = pack([group], TrainConfig(), max_length=1024, pad_token_id=PAD)
    # mean 0.5, population std 0.5: A = ±0.5 / (0.5 + 1e-6)
    expected = 0.5 / (0.5 + 1e-6)
    assert batch.advantages[0, 1].item() == pytest.approx(expected)
    assert batch.advantages[1, 1].item() == pytest.approx(-expected)


def test_weights_give_each_trajectory_equal_total_and_mean_one() -> None:
    group = TrajectoryGroup(
        [traj(choice([1], [2, 3]), reward=1.0), traj(choice([1], [4, 5, 6, 7]), reward=0.0)]
    )
    batch = pack([group], NO_SCALE, max_length=1024, pad_token_id=PAD)
    # 6 completion tokens, 2 trajectories: each trajectory's weights sum to 3.
    assert batch.weights[0, :4].tolist() == [0.0, 1.5, 1.5, 0.0]
    assert batch.weights[1, :6].tolist() == [0.0, 0.75, 0.75, 0.75, 0.75, 0.0]
    assert batch.weights[batch.mask].mean().item() == pytest.approx(1.0)


def test_multi_turn_choice_extending_the_prompt_joins_one_sequence() -> None:
    first = choice([1, 2], [3, 4], [-0.1, -0.2])
    second = choice([1, 2, 3, 4, 9, 9], [5], [-0.3])  # prompt = previous + tool/user turn
    unrelated = choice([7], [8], [-0.4])  # not an extension: a new sequence
    group = TrajectoryGroup(
        [
            traj(first, {"role": "user", "content": "more"}, second, unrelated, reward=1.0),
            traj(choice([1], [2]), reward=0.0),
        ]
    )
    sequences, _ = build_sequences([group], NO_SCALE)
    mine = [s for s in sequences if s.trajectory_index == 0]
    assert [list(s.tokens) for s in mine] == [[1, 2, 3, 4, 9, 9, 5], [7, 8]]
    assert list(mine[0].completion) == [False, False, True, True, False, False, True]
    lp = mine[0].logprobs
    assert [lp[2], lp[3], lp[6]] == [-0.1, -0.2, -0.3]
    assert math.isnan(lp[4]) and math.isnan(lp[5])


def test_additional_histories_are_their_own_sequences() -> None:
    sub = History(messages_and_choices=[{"role": "user", "content": "s"}, choice([1, 2], [3])])
    group = TrajectoryGroup(
        [traj(choice([1, 2], [4]), reward=1.0, histories=[sub]), traj(choice([1], [5]), reward=0.0)]
    )
    sequences, _ = build_sequences([group], NO_SCALE)
    assert [list(s.tokens) for s in sequences] == [[1, 2, 4], [1, 2, 3], [1, 5]]
    assert [s.advantage for s in sequences] == [0.5, 0.5, -0.5]


def test_equal_rewards_and_rewards_at_the_mean_train_nothing() -> None:
    flat = TrajectoryGroup([traj(choice([1], [2]), reward=1.0), traj(choice([1], [3]), reward=1.0)])
    single = TrajectoryGroup([traj(choice([1], [2]), reward=3.0)])
    spread = TrajectoryGroup(
        [
            traj(choice([1], [2]), reward=0.0),
            traj(choice([1], [3]), reward=1.0),
            traj(choice([1], [4]), reward=2.0),
        ]
    )
    batch = pack([flat, single, spread], NO_SCALE, max_length=1024, pad_token_id=PAD)
    assert batch.num_groups == 3 and batch.num_groups_trainable == 1
    # the middle trajectory sits at the mean: A = 0, dropped
    assert sorted(batch.tokens[:, 1].tolist()) == [2, 4]
    empty = pack([flat, single], NO_SCALE, max_length=1024, pad_token_id=PAD)
    assert empty.num_rows == 0 and empty.num_trainable_tokens == 0
    assert empty.num_groups_trainable == 0


def test_too_long_sequences_are_dropped_and_counted() -> None:
    group = TrajectoryGroup(
        [traj(choice(list(range(1, 200)), [5]), reward=1.0), traj(choice([1], [6]), reward=0.0)]
    )
    batch = pack([group], NO_SCALE, max_length=128, pad_token_id=PAD)
    assert batch.num_rows == 1 and batch.num_dropped_too_long == 1
    assert batch.tokens[0, :2].tolist() == [1, 6]
    fixed = pack(
        [group],
        TrainConfig(packed_sequence_length=64, scale_rewards=False),
        max_length=1024,
        pad_token_id=PAD,
    )
    assert fixed.seq_len == 64 and fixed.num_dropped_too_long == 1
    with pytest.raises(InvalidInputError, match="packed_sequence_length=2048"):
        pack([group], TrainConfig(packed_sequence_length=2048), max_length=1024, pad_token_id=PAD)


def test_longest_sequence_sets_the_row_length_in_multiples_of_128() -> None:
    group = TrajectoryGroup(
        [traj(choice(list(range(1, 129)), [5]), reward=1.0), traj(choice([1], [6]), reward=0.0)]
    )
    batch = pack([group], NO_SCALE, max_length=1024, pad_token_id=PAD)
    assert batch.seq_len == 256


def test_shuffle_is_deterministic_for_a_seed() -> None:
    group = TrajectoryGroup([traj(choice([1], [10 + i]), reward=float(i)) for i in range(8)])
    a = pack([group], NO_SCALE, max_length=1024, pad_token_id=PAD, shuffle_seed=3)
    b = pack([group], NO_SCALE, max_length=1024, pad_token_id=PAD, shuffle_seed=3)
    plain = pack([group], NO_SCALE, max_length=1024, pad_token_id=PAD)
    assert torch.equal(a.tokens, b.tokens)
    assert sorted(a.tokens[:, 1].tolist()) == sorted(plain.tokens[:, 1].tolist())


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (choice(None, [2]), "group 0, trajectory 1, choice 0 .* lacks prompt_token_ids"),
        (choice([1], None), "lacks token_ids"),
        (choice([1], [2, 3], [-1.0]), "1 token logprobs for 2 token_ids"),
        (choice([1], [2], with_logprobs=False), "has no token logprobs"),
        (choice([1], ["a"]), "token_ids must be a list of token ids"),  # type: ignore[list-item]
    ],
)
def test_bad_choices_are_refused_naming_where(bad: Choice, message: str) -> None:
    group = TrajectoryGroup([traj(choice([1], [2]), reward=1.0), traj(bad, reward=0.0)])
    with pytest.raises(InvalidInputError, match=message):
        pack([group], NO_SCALE, max_length=1024, pad_token_id=PAD)


def test_bad_choice_in_a_zero_variance_group_is_still_refused() -> None:
    group = TrajectoryGroup(
        [traj(choice(None, [2]), reward=1.0), traj(choice([1], [2]), reward=1.0)]
    )
    with pytest.raises(InvalidInputError, match="group 0, trajectory 0"):
        pack([group], NO_SCALE, max_length=1024, pad_token_id=PAD)


def test_missing_logprobs_allowed_by_flag_become_nan() -> None:
    config = TrainConfig(allow_training_without_logprobs=True, scale_rewards=False)
    group = TrajectoryGroup(
        [
            traj(choice([1], [2, 3], with_logprobs=False), reward=1.0),
            traj(choice([1], [4]), reward=0.0),
        ]
    )
    batch = pack([group], config, max_length=1024, pad_token_id=PAD)
    row = batch.tokens[:, 1].tolist().index(2)
    assert batch.mask[row, 1:3].all()
    assert torch.isnan(batch.old_logprobs[row, 1:3]).all()
