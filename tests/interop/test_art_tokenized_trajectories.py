"""`arthex.art.trajectories.tokenize` gives what ART 0.5.23's gives: the same trajectory groups
(sampled on the tiny model's tokenizer and chat template, their Choices carrying the prompt and
completion token ids as a server returns them) go through ART's `tokenize` in ART's venv and
arthex's here (art/tokenized_trajectories_script.py, one script for both), single- and
multi-history, and every history must agree in its kind, model, token ids, logprobs and flags;
the first-occurrence masks of each multi-history trajectory agree for every `where`; a
rewritten history, two histories without `multi_history` and a missing `model=` are refused
by both; and a tokenized group arthex dumped reads back in ART with the same fields.

The cases: single turns, a multi-turn conversation whose prompts extend, an additional
history sharing the main one's opening, a rewritten history, a Choice without logprobs, and
one that names its `logprobs_mode` and stopped on its last token (`stop_reason`).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from arthex.core.trajectories import History, Trajectory, TrajectoryGroup
from arthex.testing.tiny_model import tiny_model

from .art_env import both_outcomes
from .test_art_tokenize import Sampler, multi_turn, single


def flagged(sampler: Sampler) -> Trajectory:
    """A Choice without logprobs, then one in raw-logprobs mode that stopped on its eos."""
    first: list[Any] = [{"role": "user", "content": "yes or no?"}]
    prompt = sampler.prompt(first)
    one = sampler.choice(prompt, "yes")
    one = one.model_copy(update={"logprobs": None})
    two_prompt = [*prompt, *(one.model_extra or {})["token_ids"], *sampler.text("\nmaybe\n")]
    two = sampler.choice(two_prompt, "no")
    extra = dict(two.model_extra or {})
    extra.update(logprobs_mode="raw_logprobs", stop_reason=extra["token_ids"][-1])
    two = two.model_validate({**two.model_dump(), **extra})
    return Trajectory(messages_and_choices=[*first, one, two], reward=0.25,
                      metadata={"id": "flagged"})  # fmt: skip


def cases(sampler: Sampler) -> list[list[TrajectoryGroup]]:
    main = single(sampler, "d", "What is the weather today?", "It is sunny.", 0.5)
    aside = single(sampler, "aside", "Guess the secret number.", "It is higher.", 0.0)
    with_history = Trajectory(
        messages_and_choices=main.messages_and_choices,
        additional_histories=[
            History(messages_and_choices=aside.messages_and_choices),
            History(messages_and_choices=main.messages_and_choices),  # the same again
        ],
        reward=main.reward,
        metadata={"id": "d"},
    )
    return [
        [
            TrajectoryGroup([
                single(sampler, "a", "What is two plus two?", "Two plus two is four.", 1.0),
                multi_turn(sampler, "b", 0.0, rewrite=False),
                single(sampler, "c", "What is two plus two?", "The answer is: 4", 0.5),
            ]),
            TrajectoryGroup([single(sampler, "h", "yes or no?", "yes", 1.0), flagged(sampler)]),
        ],
        [TrajectoryGroup([with_history])],
        [TrajectoryGroup([multi_turn(sampler, "e", 0.2, rewrite=True)])],
    ]  # fmt: skip


@pytest.fixture(scope="module")
def compared(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any]]:
    from arthex.art.tokenizer import get_tokenizer
    from arthex.art.trajectories import tokenize

    model = Path(tiny_model(tmp_path_factory.mktemp("tokenized") / "model"))
    groups = cases(Sampler(get_tokenizer(str(model))))
    ours = asyncio.run(tokenize(groups[0], model="tiny"))
    payload = {
        "groups": [[g.model_dump(mode="json") for g in case] for case in groups],
        "dumps": [tokenized.model_dump_json() for tokenized in ours],
    }
    return both_outcomes("tokenized_trajectories_script", payload)


def test_tokenize_gives_arts_histories(compared: tuple[dict[str, Any], dict[str, Any]]) -> None:
    art, ours = compared
    assert ours["single"] == art["single"]
    assert ours["multi"] == art["multi"]
    single, multi = art["single"], art["multi"]
    assert single[1] == single[2] == multi[2] == "refused"  # two histories; a rewritten one
    assert [len(t["histories"]) for t in multi[1][0]] == [3]
    last = single[0][1][1]["histories"][0]
    assert last["flags"][-1] == 1 | 2 | 4 | 8 | 16 | 32  # sampled, raw logprobs, stopped
    assert None in last["logprobs"] and last["kind"] == "legacy"


def test_first_occurrence_masks_give_arts(compared: tuple[dict[str, Any], dict[str, Any]]) -> None:
    art, ours = compared
    assert ours["masks"] == art["masks"]
    shared = art["masks"][-1][0]  # where=None on the trajectory with two more histories
    assert not any(shared[2]) and not all(shared[1])  # a repeat is never first


def test_models_must_be_named_and_arthexs_dumps_read_in_art(
    compared: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    art, ours = compared
    assert art["no_model"] == ours["no_model"] == "refused"
    assert art["dumps"] == ours["dumps"] == art["single"][0]
