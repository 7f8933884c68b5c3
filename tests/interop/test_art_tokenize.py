"""`arthex.art.preprocessing.tokenize` gives what ART 0.5.23's gives: the same groups (sampled
on the tiny model's tokenizer, their Choices carrying the prompt and completion token ids as a
server returns them) go through ART's `tokenize_trajectory_groups` in ART's venv
(art/tokenize_script.py) and through arthex's here, with two option sets, and every result
must agree in order and in every field ART fills from sampled Choices: token ids, positions,
assistant masks, logprobs, choice offsets, advantages, weights, prompt ids and shared prompt
lengths, decoded tokens, and the results `without_prompt()`; `tokenize_trajectory` on each
trajectory's main history too.

The groups hold single turns, a multi-turn conversation whose prompts extend, one whose
history was rewritten (two sequences), an additional history, tied rewards (advantage 0),
a group of equal rewards and a group of one.
"""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path
from typing import Any

import pytest

from arthex.core.errors import InvalidInputError
from arthex.core.trajectories import History, Trajectory, TrajectoryGroup
from arthex.testing.builders import sampled_choice
from arthex.testing.tiny_model import tiny_model

from .art_env import SCRIPTS, art_environment, art_python

OPTIONS: list[dict[str, Any]] = [
    {"allow_training_without_logprobs": False, "scale_rewards": True},
    {
        "allow_training_without_logprobs": False,
        "scale_rewards": False,
        "shuffle_group_trajectories": False,
        "drop_zero_advantage_trajectories": False,
    },
]

# What ART's `import torch` and `from transformers.tokenization_utils_base import ...` need to
# succeed, and nothing more: a real use of either fails in ART's process.
STAND_INS = {
    "torch/__init__.py": "class Tensor:\n    pass\n",
    "transformers/__init__.py": "",
    "transformers/tokenization_utils_base.py": (
        "class BatchEncoding(dict):\n    pass\n\n\nclass PreTrainedTokenizerBase:\n    pass\n"
    ),
}


class Sampler:
    """Choices as a server returns them, on the tiny model's tokenizer and chat template."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.calls = 0

    def prompt(self, messages: list[dict[str, Any]]) -> list[int]:
        text = self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True
        )
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def text(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def choice(self, prompt: list[int], reply: str) -> Any:
        self.calls += 1
        ids = [*self.text(reply), self.tokenizer.eos_token_id]
        logprobs = [-0.05 * (k + 1) - 0.001 * self.calls for k in range(len(ids))]
        return sampled_choice(reply, prompt_token_ids=prompt, token_ids=ids, logprobs=logprobs)


def single(sampler: Sampler, tid: str, question: str, reply: str, reward: float) -> Trajectory:
    messages: list[Any] = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": question},
    ]
    choice = sampler.choice(sampler.prompt(messages), reply)
    return Trajectory(messages_and_choices=[*messages, choice], reward=reward,
                      metadata={"id": tid})  # fmt: skip


def multi_turn(sampler: Sampler, tid: str, reward: float, *, rewrite: bool) -> Trajectory:
    """Two turns: the second prompt extends the first sequence, or (`rewrite`) is a history
    the agent rewrote, which starts a new sequence."""
    first: list[Any] = [{"role": "user", "content": "What is two plus two?"}]
    prompt = sampler.prompt(first)
    one = sampler.choice(prompt, "Two plus two is four.")
    turn = "\n<|im_start|>user\nCount from one to ten.<|eos|>\n<|im_start|>assistant\n"
    if rewrite:
        second_prompt = sampler.prompt([{"role": "user", "content": "Count from one to ten."}])
    else:
        second_prompt = [*prompt, *(one.model_extra or {})["token_ids"], *sampler.text(turn)]
    two = sampler.choice(second_prompt, "one two three four five six seven eight nine ten")
    return Trajectory(
        messages_and_choices=[*first, one, {"role": "user", "content": "Count from one to ten."},
                              two],
        reward=reward,
        metadata={"id": tid},
    )  # fmt: skip


def make_groups(sampler: Sampler) -> list[TrajectoryGroup]:
    aside = single(sampler, "aside", "Guess the secret number.", "It is higher.", 0.0)
    main = single(sampler, "d", "What is the weather today?", "It is sunny.", 0.5)
    with_history = Trajectory(
        messages_and_choices=main.messages_and_choices,
        additional_histories=[History(messages_and_choices=aside.messages_and_choices)],
        reward=main.reward,
        metadata=main.metadata,
    )
    return [
        TrajectoryGroup([
            single(sampler, "a", "What is two plus two?", "Two plus two is four.", 1.0),
            multi_turn(sampler, "b", 0.0, rewrite=False),
            single(sampler, "c", "What is two plus two?", "The answer is: 4", 0.5),
            with_history,
        ]),
        TrajectoryGroup([
            multi_turn(sampler, "e", 0.2, rewrite=True),
            single(sampler, "f", "Count from one to ten.", "one two three", 0.9),
            single(sampler, "g", "Hello!", "How can I help you today?", 0.4),
        ]),
        TrajectoryGroup([
            single(sampler, "h", "yes or no?", "yes", 1.0),
            single(sampler, "i", "yes or no?", "no", 1.0),
        ]),
        TrajectoryGroup([single(sampler, "j", "true or false?", "true", 1.0)]),
    ]  # fmt: skip


def plain(values: list[float]) -> list[float | None]:
    return [None if math.isnan(v) else v for v in values]


def ours(result: Any) -> dict[str, Any]:
    return {
        "trajectory": result.trajectory.metadata["id"],
        "advantage": result.advantage,
        "chat": result.chat,
        "token_ids": result.token_ids,
        "input_pos": result.input_pos,
        "assistant_mask": result.assistant_mask,
        "logprobs": plain(result.logprobs),
        "choice_offsets": result.choice_offsets,
        "extra_logprobs": result.extra_logprobs,
        "weight": result.weight,
        "prompt_id": result.prompt_id,
        "prompt_length": result.prompt_length,
        "tokens": result.tokens,
        "without_prompt": result.without_prompt().token_ids,
        "pixel_values": result.pixel_values,
    }


def same(art: dict[str, Any], arthex: dict[str, Any]) -> None:
    for key in ("advantage", "weight"):  # ART sums in float order, arthex with fsum
        assert arthex[key] == pytest.approx(art[key], rel=1e-9), key
    for key in art:
        if key not in ("advantage", "weight"):
            assert arthex[key] == art[key], (art["trajectory"], key)


@pytest.fixture(scope="module")
def compared(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any]]:
    from transformers import AutoTokenizer

    import arthex.art.preprocessing.tokenize as art_tokenize

    tmp = tmp_path_factory.mktemp("tokenize")
    model = Path(tiny_model(tmp / "model"))
    tokenizer = AutoTokenizer.from_pretrained(str(model))
    groups = make_groups(Sampler(tokenizer))
    task = tmp / "task.json"
    task.write_text(json.dumps({
        "groups": [group.model_dump(mode="json") for group in groups],
        "tokenizer": str(model / "tokenizer.json"),
        "options": OPTIONS,
    }))  # fmt: skip
    for name, text in STAND_INS.items():
        (tmp / "imports" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp / "imports" / name).write_text(text)
    env = art_environment()
    env["PYTHONPATH"] = str(tmp / "imports")
    out = tmp / "art.json"
    done = subprocess.run(
        [str(art_python()), str(SCRIPTS / "tokenize_script.py"), str(task), str(out)],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    art: dict[str, Any] = json.loads(out.read_text())
    arthex: dict[str, Any] = {"groups": [], "single": []}
    for options in OPTIONS:
        results = art_tokenize.tokenize_trajectory_groups(tokenizer, groups, **options)
        arthex["groups"].append([ours(r) for r in results])
    for group in groups:
        for trajectory in group.trajectories:
            history = History(messages_and_choices=trajectory.messages_and_choices,
                              tools=trajectory.tools)  # fmt: skip
            try:
                one = art_tokenize.tokenize_trajectory(
                    tokenizer, None, history, 0.5, False, trajectory
                )
            except InvalidInputError:
                arthex["single"].append("several sequences")
                continue
            arthex["single"].append(None if one is None else ours(one))
    return art, arthex


@pytest.mark.parametrize("option", range(len(OPTIONS)))
def test_tokenize_trajectory_groups_gives_arts_results(
    compared: tuple[dict[str, Any], dict[str, Any]], option: int
) -> None:
    art, arthex = compared
    art_results, our_results = art["groups"][option], arthex["groups"][option]
    assert [r["trajectory"] for r in our_results] == [r["trajectory"] for r in art_results]
    for art_result, our_result in zip(art_results, our_results, strict=True):
        same(art_result, our_result)
    seen = {r["trajectory"] for r in art_results}
    if OPTIONS[option].get("drop_zero_advantage_trajectories", True):
        assert seen == {"a", "b", "e", "f", "g"}  # ties, equal and lone rewards: nothing to learn
    else:
        assert seen == set("abcdefghij")
    assert sum(r["trajectory"] == "e" for r in art_results) == 2  # a rewritten history
    assert any(r["prompt_length"] > 0 for r in art_results)


def test_tokenize_trajectory_gives_arts_result(
    compared: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    art, arthex = compared
    assert len(arthex["single"]) == len(art["single"]) == 10
    for art_one, our_one in zip(art["single"], arthex["single"], strict=True):
        if isinstance(art_one, dict):
            same(art_one, our_one)
        else:
            assert our_one == art_one
    assert art["single"].count("several sequences") == 1
