"""Training samples from hand-written recorded calls: the order calls are merged in, which
sample a prompt extends, and the exact refusals of ids and logprobs that training cannot use."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from arthex.core.capture import token_samples
from arthex.core.errors import InvalidInputError
from arthex.core.trajectories import Trajectory

T0 = datetime(2026, 1, 1, tzinfo=UTC)
UNSET: Any = object()


def exchange(
    prompt: Any, sampled: Any, *, second: int = 0, logprobs: Any = UNSET
) -> dict[str, Any]:
    """One recorded call with one choice; ids sit on the choice, as arthex's server sends them.
    `logprobs` defaults to -0.5 per sampled id; None records the choice without logprobs."""
    if logprobs is UNSET:
        logprobs = [-0.5] * len(sampled or [])
    choice: dict[str, Any] = {
        "index": 0,
        "message": {"role": "assistant", "content": "x"},
        "finish_reason": "stop",
        "logprobs": None
        if logprobs is None
        else {
            "content": [
                {"token": "t", "logprob": lp, "bytes": None, "top_logprobs": []} for lp in logprobs
            ]
        },
    }
    if prompt is not None:
        choice["prompt_token_ids"] = prompt
    if sampled is not None:
        choice["token_ids"] = sampled
    when = (T0 + timedelta(seconds=second)).isoformat()
    return {
        "start_time": when,
        "end_time": when,
        "request": {"model": "m", "messages": []},
        "response": {"id": "c", "object": "chat.completion", "created": 1, "model": "m",
                     "choices": [choice]},
    }  # fmt: skip


def trajectory(*exchanges: dict[str, Any]) -> Trajectory:
    return Trajectory.model_validate({"exchanges": {"chat_completions": list(exchanges)}})


def test_calls_merge_in_the_order_they_started_not_the_order_they_were_recorded() -> None:
    # The second turn's call finished (and was appended) before the first turn's record.
    first = exchange([1, 2], [3], second=1)
    second = exchange([1, 2, 3, 7], [4, 5], second=2)
    (sample,) = token_samples(trajectory(second, first), "t")
    assert sample.tokens == (1, 2, 3, 7, 4, 5)
    assert sample.trained == (False, False, True, False, True, True)
    assert sample.choices == 2


def test_calls_that_started_at_the_same_instant_merge_in_their_recorded_order() -> None:
    first = exchange([1, 2], [3], second=5)
    second = exchange([1, 2, 3, 7], [4], second=5)
    (sample,) = token_samples(trajectory(first, second), "t")
    assert sample.tokens == (1, 2, 3, 7, 4) and sample.choices == 2


def test_a_longer_prompt_that_does_not_extend_a_sample_starts_its_own() -> None:
    first = exchange([1, 2], [3], second=1)
    other = exchange([9, 9, 9, 9, 9], [4], second=2)
    earlier, later = token_samples(trajectory(first, other), "t")
    assert earlier.tokens == (1, 2, 3) and earlier.choices == 1
    assert later.tokens == (9, 9, 9, 9, 9, 4)
    assert later.trained == (False,) * 5 + (True,)


def test_a_prompt_equal_to_a_sample_continues_it_with_nothing_untrained_between() -> None:
    first = exchange([1, 2], [3], second=1)
    again = exchange([1, 2, 3], [4], second=2)
    (sample,) = token_samples(trajectory(first, again), "t")
    assert sample.tokens == (1, 2, 3, 4)
    assert sample.trained == (False, False, True, True)
    assert sample.sampled == (3, 4)


def test_a_choice_without_ids_is_refused_naming_each_missing_field_and_the_remedy() -> None:
    remedy = (
        ": training uses the sampler's token ids. Sample through an arthex backend's endpoint "
        "(model.openai_client(), or any client built from its base_url), or ask vLLM for them "
        "with return_token_ids"
    )
    with pytest.raises(InvalidInputError) as both:
        token_samples(trajectory(exchange(None, None)), "t")
    assert str(both.value) == "t, call 0, choice 0 lacks prompt_token_ids and token_ids" + remedy
    with pytest.raises(InvalidInputError) as one:
        token_samples(trajectory(exchange([1], None)), "t")
    assert str(one.value) == "t, call 0, choice 0 lacks token_ids" + remedy


@pytest.mark.parametrize("bad", [[5, -1], [True], ["7"], "12"], ids=repr)
def test_ids_that_are_not_token_ids_are_refused_naming_the_field(bad: Any) -> None:
    for field, call in (
        ("prompt_token_ids", exchange(bad, [1])),
        ("token_ids", exchange([1], bad, logprobs=[-0.5])),
    ):
        with pytest.raises(InvalidInputError) as refused:
            token_samples(trajectory(call), "t")
        assert str(refused.value) == (
            f"t, call 0, choice 0: {field} must be a list of token ids (ints >= 0)"
        )


def test_token_id_zero_is_a_valid_id() -> None:
    (sample,) = token_samples(trajectory(exchange([0], [0])), "t")
    assert sample.tokens == (0, 0) and sample.trained == (False, True)


def test_an_empty_completion_without_logprobs_is_refused_unless_allowed() -> None:
    empty = trajectory(exchange([1, 2], [], logprobs=None))
    with pytest.raises(InvalidInputError) as refused:
        token_samples(empty, "t")
    assert str(refused.value) == (
        "t, call 0, choice 0 has no token logprobs; request them with logprobs=True, or set "
        "TrainConfig(allow_training_without_logprobs=True) to train with ratio 1"
    )
    (sample,) = token_samples(empty, "t", allow_without_logprobs=True)
    assert sample.tokens == (1, 2) and sample.sampled == ()


def test_logprobs_that_do_not_match_the_ids_one_to_one_are_refused_with_both_counts() -> None:
    edited = trajectory(exchange([1], [2, 3, 4], logprobs=[-0.5, -0.5]))
    with pytest.raises(InvalidInputError) as refused:
        token_samples(edited, "t")
    assert str(refused.value) == (
        "t, call 0, choice 0 has 2 token logprobs for 3 token_ids; they must match one to one "
        "(was the Choice edited after sampling?)"
    )


def test_an_infinite_logprob_is_trained_as_unknown() -> None:
    (sample,) = token_samples(trajectory(exchange([1], [2, 3], logprobs=[-math.inf, -0.5])), "t")
    assert math.isnan(sample.logprobs[0]) and math.isnan(sample.logprobs[1])
    assert sample.logprobs[2] == -0.5


def test_calls_recorded_through_other_apis_are_refused_listing_each_api() -> None:
    other = Trajectory.model_validate(
        {"exchanges": {"completions": [{"request": {}}], "responses": [{"request": {}}]}}
    )
    with pytest.raises(InvalidInputError) as refused:
        token_samples(other, "group 0, trajectory 1")
    assert str(refused.value) == (
        "group 0, trajectory 1 holds calls recorded through the completions, responses API; "
        "arthex trains chat completions only (record the agent against /chat/completions)"
    )
