"""`arthex.art.preprocessing.tokenize` where arthex's behaviour is its own (ART's is compared
in tests/interop/test_art_tokenize.py): worked examples on hand-made token ids."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from openai.types.chat.chat_completion import Choice

from arthex.art.preprocessing.tokenize import (
    TokenizedResult,
    assemble_vllm_training_sequences,
    tokenize_trajectory,
    tokenize_trajectory_groups,
)
from arthex.core.errors import InvalidInputError
from arthex.core.exchanges import TrajectoryExchanges
from arthex.core.trajectories import History, Trajectory, TrajectoryGroup
from arthex.testing.builders import sampled_choice


class Letters:
    """Decodes id n as the letter n places after 'a' (the results only decode ids)."""

    def decode(self, token_id: int, /) -> str:
        return chr(ord("a") + token_id)


def trajectory(prompt: list[int], sampled: list[int], reward: float) -> Trajectory:
    choice = sampled_choice("x", prompt_token_ids=prompt, token_ids=sampled,
                            logprobs=[-0.5] * len(sampled))  # fmt: skip
    return Trajectory(messages_and_choices=[{"role": "user", "content": "q"}, choice],
                      reward=reward)  # fmt: skip


def test_a_group_becomes_weighted_sequences_sharing_their_prompt() -> None:
    group = TrajectoryGroup([trajectory([0, 1, 2], [3, 4], 1.0), trajectory([0, 1, 2], [5], 0.0)])
    results = list(tokenize_trajectory_groups(Letters(), [group], False, False,
                                              shuffle_group_trajectories=False))  # fmt: skip
    first, second = results
    assert first.token_ids == [0, 1, 2, 3, 4] and first.assistant_mask == [0, 0, 0, 1, 1]
    assert (first.advantage, second.advantage) == (0.5, -0.5)  # r - mean, unscaled
    assert first.weight == pytest.approx(1 / 2) and second.weight == pytest.approx(1.0)
    assert first.choice_offsets == [3] and first.input_pos == [0, 1, 2, 3, 4]
    assert math.isnan(first.logprobs[0]) and first.logprobs[3:] == [-0.5, -0.5]
    # three shared tokens, stopping one before the first trained one
    assert first.prompt_length == second.prompt_length == 2
    assert first.without_prompt().token_ids == [2, 3, 4] and first.tokens == list("abcde")
    assert isinstance(first, TokenizedResult)


def test_a_choice_without_logprobs_is_refused_unless_allowed() -> None:
    bare = Choice.model_validate({
        "index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "x"},
        "prompt_token_ids": [0, 1], "token_ids": [2],
    })  # fmt: skip
    group = TrajectoryGroup([
        Trajectory(messages_and_choices=[bare], reward=1.0), trajectory([0, 1], [3], 0.0)
    ])  # fmt: skip
    with pytest.raises(InvalidInputError, match=r"group 0, trajectory 0.*no token logprobs"):
        list(tokenize_trajectory_groups(Letters(), [group], False, True))
    results = list(tokenize_trajectory_groups(Letters(), [group], True, True,
                                              shuffle_group_trajectories=False))  # fmt: skip
    assert results[0].token_ids == [0, 1, 2] and math.isnan(results[0].logprobs[2])


def test_one_history_gives_one_result_or_says_it_makes_several() -> None:
    one = sampled_choice("a", prompt_token_ids=[0], token_ids=[1], logprobs=[-1.0])
    grows = sampled_choice("b", prompt_token_ids=[0, 1, 2], token_ids=[3], logprobs=[-1.0])
    rewritten = sampled_choice("c", prompt_token_ids=[5], token_ids=[6], logprobs=[-1.0])
    owner = Trajectory()
    result = tokenize_trajectory(Letters(), None, History(messages_and_choices=[one, grows]),
                                 1.0, False, owner)  # fmt: skip
    assert result is not None and result.token_ids == [0, 1, 2, 3]
    assert result.choice_offsets == [1, 3] and result.assistant_mask == [0, 1, 0, 1]
    assert tokenize_trajectory(Letters(), None, History(), 1.0, False, owner) is None
    split = History(messages_and_choices=[one, rewritten])
    with pytest.raises(InvalidInputError, match="makes 2 sequences"):
        tokenize_trajectory(Letters(), None, split, 1.0, False, owner)
    both = assemble_vllm_training_sequences(tokenizer=Letters(), histories=[split],
                                            advantage=1.0, allow_training_without_logprobs=False,
                                            trajectory=owner)  # fmt: skip
    assert [r.token_ids for r in both] == [[0, 1], [5, 6]]


def test_a_captured_trajectory_gives_its_samples_and_refuses_a_model_selector() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    calls = []
    for k, (prompt, sampled) in enumerate([([0, 1], [2]), ([0, 1, 2, 3], [4, 5])]):
        calls.append({
            "request": {"model": "m", "messages": [{"role": "user", "content": "q"}]},
            "response": {
                "id": f"c{k}", "object": "chat.completion", "created": 0, "model": "m",
                "choices": [sampled_choice("x", prompt_token_ids=prompt, token_ids=sampled,
                                           logprobs=[-1.0] * len(sampled)).model_dump()],
            },
            "start_time": (start + timedelta(seconds=k)).isoformat(),
            "end_time": (start + timedelta(seconds=k, milliseconds=5)).isoformat(),
        })  # fmt: skip
    exchanges = TrajectoryExchanges.model_validate({"chat_completions": calls})
    group = TrajectoryGroup([
        Trajectory(exchanges=exchanges, reward=1.0), trajectory([0], [1], 0.0)
    ])  # fmt: skip
    first = next(iter(tokenize_trajectory_groups(Letters(), [group], False, True,
                                                 shuffle_group_trajectories=False)))  # fmt: skip
    assert first.token_ids == [0, 1, 2, 3, 4, 5]
    assert first.assistant_mask == [0, 0, 1, 0, 1, 1] and first.choice_offsets == [2, 4]
    with pytest.raises(InvalidInputError, match=r"model='m'.*leave model= unset"):
        list(tokenize_trajectory_groups(Letters(), [group], False, True, model="m"))
