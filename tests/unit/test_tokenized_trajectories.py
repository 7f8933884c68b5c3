"""ART's tokenized and tensorized trajectories under `arthex.art.trajectories`, on worked
examples whose Choices carry made-up token ids (tests/interop/test_art_tokenized_trajectories.py
compares the same code with ART's on sampled ones)."""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

import pytest

from arthex.art.trajectories import (
    TokenFlag,
    TokenizedHistory,
    TokenizedTrajectory,
    TokenizedTrajectoryGroup,
    first_occurrence_masks,
    tensorize,
    tokenize,
)
from arthex.core.errors import InvalidInputError, UnsupportedCapability
from arthex.core.trajectories import History, Trajectory, TrajectoryGroup
from arthex.testing.builders import sampled_choice

E, S, A, OUTPUT, STOP = (TokenFlag.EXACT, TokenFlag.SAMPLED, TokenFlag.ASSISTANT,
                         TokenFlag.OUTPUT, TokenFlag.STOP)  # fmt: skip
OUT = E | S | A | OUTPUT


def choice(prompt: list[int], ids: list[int], **extra: Any) -> Any:
    made = sampled_choice("x", prompt_token_ids=prompt, token_ids=ids,
                          logprobs=[-0.5 * (k + 1) for k in range(len(ids))])  # fmt: skip
    return made.model_validate({**made.model_dump(), **extra}) if extra else made


def two_turns(reward: float = 1.0) -> Trajectory:
    return Trajectory(
        messages_and_choices=[
            {"role": "user", "content": "q"},
            choice([1, 2], [7, 8]),
            {"role": "user", "content": "again"},
            choice([1, 2, 7, 8, 3], [9], stop_reason=9, logprobs_mode="processed_logprobs"),
        ],
        reward=reward,
    )


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def test_a_history_is_its_prompts_and_samples_in_order_with_flags() -> None:
    [one] = run(tokenize([two_turns()], model="m"))
    assert isinstance(one, TokenizedTrajectory) and one.model == "m"
    assert one.tokens == [1, 2, 7, 8, 3, 9]
    assert one.flags == [E, E, OUT, OUT, E, OUT | TokenFlag.PROCESSED_LOGPROBS | STOP]
    assert [None if math.isnan(v) else v for v in one.logprobs] == [
        None, None, -0.5, -1.0, None, -0.5]  # fmt: skip
    assert one.reward == 1.0 and one.trajectory.messages_and_choices[0] == {
        "role": "user", "content": "q"}  # fmt: skip


def test_a_prompt_that_does_not_extend_the_history_is_refused() -> None:
    rewritten = Trajectory(messages_and_choices=[choice([1, 2], [7]), choice([1, 5], [8])])
    with pytest.raises(InvalidInputError, match="choice 1's prompt does not extend"):
        run(tokenize([rewritten], model="m"))


def test_a_model_is_required_and_recorded_calls_are_refused() -> None:
    with pytest.raises(InvalidInputError, match="requires model="):
        run(tokenize([two_turns()]))
    captured = Trajectory.model_validate(
        {"exchanges": {"completions": [{"start_time": "2026-01-01T00:00:00Z",
                                        "end_time": "2026-01-01T00:00:01Z", "request": {},
                                        "response": {"id": "c", "object": "text_completion",
                                                     "created": 0, "model": "m",
                                                     "choices": []}}]}}
    )  # fmt: skip
    with pytest.raises(UnsupportedCapability, match="recorded calls"):
        run(tokenize([captured], model="m"))


def test_several_histories_need_multi_history() -> None:
    trajectory = two_turns()
    trajectory.additional_histories = [History(messages_and_choices=[choice([1, 2], [7, 6])])]
    with pytest.raises(InvalidInputError, match="exactly one history; found 2"):
        run(tokenize([trajectory], model="m"))
    [multi] = run(tokenize([trajectory], model="m", multi_history=True))
    assert [h.tokens for h in multi.histories] == [[1, 2, 7, 8, 3, 9], [1, 2, 7, 6]]
    assert multi.first_occurrence_masks() == [[True] * 6, [False, False, False, True]]
    assert multi.first_occurrence_masks(where=TokenFlag.SAMPLED) == [
        [False, False, True, True, False, True], [False, False, False, True]]  # fmt: skip


def test_first_occurrences_are_per_model_and_ineligible_tokens_claim_nothing() -> None:
    def history(model: str, tokens: list[int], flags: list[TokenFlag]) -> TokenizedHistory:
        return TokenizedHistory(history=History(), model=model, tokens=tokens,
                                logprobs=[math.nan] * len(tokens), flags=flags)  # fmt: skip

    masks = first_occurrence_masks(
        [history("a", [1, 2], [E, E]), history("b", [1, 2], [E, E]),
         history("a", [1, 2, 3], [E, OUT, OUT])],
        where=TokenFlag.SAMPLED,
    )  # fmt: skip
    assert masks == [[False, False], [False, False], [False, True, True]]
    assert first_occurrence_masks([]) == []


def test_groups_keep_their_order_and_one_trajectory_object() -> None:
    group = TrajectoryGroup([two_turns(0.0), two_turns(1.0)], metadata={"k": 1})
    [tokenized] = run(tokenize([group], model="m"))
    assert [t.reward for t in tokenized.trajectories] == [0.0, 1.0]
    assert tokenized.trajectories[1].trajectory is group.trajectories[1]
    assert tokenized.metadata == {"k": 1}
    mixed: list[Any] = [group, two_turns()]
    with pytest.raises(TypeError, match="all Trajectory or all TrajectoryGroup"):
        run(tokenize(mixed, model="m"))


def test_the_json_is_arts_shape_and_reads_back() -> None:
    [tokenized] = run(tokenize([TrajectoryGroup([two_turns()])], model="m"))
    dumped = json.loads(tokenized.model_dump_json())["trajectories"][0]
    assert dumped["history"]["kind"] == "legacy" and dumped["logprobs"][0] == "NaN"
    assert dumped["flags"][-1] == int(OUT | TokenFlag.PROCESSED_LOGPROBS | STOP) == 95
    back = TokenizedTrajectoryGroup[TokenizedTrajectory].model_validate_json(
        tokenized.model_dump_json()
    )
    assert back.trajectories[0].tokens == tokenized.trajectories[0].tokens
    assert isinstance(back.trajectories[0].history, History)


def test_bad_tokenizations_are_refused_and_sampled_means_output() -> None:
    with pytest.raises(ValueError, match="differ in length"):
        TokenizedHistory(history=History(), model="m", tokens=[1], logprobs=[], flags=[E])
    with pytest.raises(ValueError, match="must also be EXACT"):
        TokenizedHistory(history=History(), model="m", tokens=[1], logprobs=[0.0], flags=[S])
    old = TokenizedHistory(history=History(), model="m", tokens=[1], logprobs=[0.0], flags=[E | S])
    assert old.flags == [E | S | OUTPUT]
    group = TrajectoryGroup([two_turns()])
    [tokenized] = run(tokenize([group], model="m"))
    with pytest.raises(ValueError, match="does not match its source group"):
        TokenizedTrajectoryGroup[TokenizedTrajectory](
            trajectory_group=TrajectoryGroup([two_turns(0.5)]),
            trajectories=tokenized.trajectories,
        )


def test_tensorized_values_are_the_tokenized_ones_as_tensors() -> None:
    torch = pytest.importorskip("torch")
    trajectory = two_turns()
    trajectory.additional_histories = [History(messages_and_choices=[choice([1, 2], [7, 6])])]
    [tensors] = run(tensorize([TrajectoryGroup([trajectory])], model="m", multi_history=True))
    [multi] = run(tokenize([TrajectoryGroup([trajectory])], model="m", multi_history=True))
    for ours, listed in zip(tensors.trajectories[0].histories, multi.trajectories[0].histories):
        assert ours.tokens.dtype == torch.int64 and ours.tokens.tolist() == listed.tokens
        assert ours.flags.dtype == torch.int32 and ours.flags.tolist() == listed.flags
        assert ours.logprobs.dtype == torch.float32
        assert torch.equal(
            ours.logprobs.isnan(), torch.tensor([math.isnan(v) for v in listed.logprobs])
        )
    masks = tensors.trajectories[0].first_occurrence_masks(where=TokenFlag.SAMPLED)
    assert [m.tolist() for m in masks] == multi.trajectories[0].first_occurrence_masks(
        where=TokenFlag.SAMPLED
    )
    moved = tensors.to("cpu")
    assert moved.trajectories[0].histories[0].tokens is not tensors.trajectories[0].histories[
        0].tokens  # fmt: skip
    dumped = moved.trajectories[0].model_dump(mode="json")["histories"][0]
    assert dumped["logprobs"][0] == "NaN" and dumped["tokens"] == [1, 2, 7, 8, 3, 9]
