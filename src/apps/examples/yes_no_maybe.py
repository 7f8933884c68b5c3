"""ART's yes/no/maybe pipeline example over arthex: each scenario asks the model to answer with
some of "yes", "no" and "maybe"; one chat completion returns the whole group
(`n=ROLLOUTS_PER_SCENARIO`), scored by the answer's first word (maybe 1.0, no 0.75, yes 0.5,
anything else 0). Same constants, scenarios, reward and PipelineTrainer settings as ART
0.5.23's `art.pipeline_trainer.yes_no_maybe_pipeline`.

Run: `python -m arthex.art.pipeline_trainer.yes_no_maybe_pipeline` (or this module). The backend
is runtime.py's choice: Tinker on `BASE_MODEL` as in ART when TINKER_API_KEY is set, else
arthex.LocalBackend on a small model (`ARTHEX_BACKEND`, `BASE_MODEL` override).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from functools import partial
from itertools import cycle, permutations
from typing import Any

from ...composition.api import TrainableModel
from ...core.chat_types import Messages
from ...core.pipeline import PipelineTrainer
from ...core.trajectories import Trajectory, TrajectoryGroup
from ...ports.training_backend import TrainingBackend
from . import runtime

BASE_MODEL = "Qwen/Qwen3-30B-A3B-Instruct-2507"  # or Qwen/Qwen3-4B-Instruct-2507
MODEL_NAME = "pipeline-yes-no-maybe"
PROJECT = "yes-no-maybe-pipeline"
ROLLOUTS_PER_SCENARIO = 32
MAX_TOKENS = 5
MAX_STEPS = 20
EVAL_TRAJECTORY_COUNT = 30
EVAL_EVERY_N_STEPS = 2

WORDS = ("yes", "no", "maybe")
REWARDS = {"maybe": 1.0, "no": 0.75, "yes": 0.5}
# what may cling to the first word ("Maybe.", "'no'") and is not part of it
PUNCTUATION = ".,!?:;\"'()[]{}"


def build_scenarios() -> list[dict[str, str]]:
    """Every prompt: two lead-ins x quoted or not x the ordered triples, then the ordered
    pairs, of the three words (48 in all, in ART's order)."""
    scenarios: list[dict[str, str]] = []
    for lead in ("respond", "just respond"):
        for quoted in (True, False):
            for size, joiner in ((3, ", "), (2, " or ")):
                for words in permutations(WORDS, size):
                    shown = [f"'{word}'" if quoted else word for word in words]
                    scenarios.append({"prompt": f"{lead} with {joiner.join(shown)}"})
    return scenarios


def reward_for_answer(text: str) -> float:
    """The answer's first word, lowercased and stripped of punctuation and quotes, scored:
    "maybe" 1.0, "no" 0.75, "yes" 0.5, anything else 0.0."""
    words = text.lower().split(maxsplit=1)
    if not words:
        return 0.0
    return REWARDS.get(words[0].strip(PUNCTUATION), 0.0)


def _messages(scenario: dict[str, str]) -> Messages:
    return [{"role": "user", "content": scenario["prompt"]}]


async def eval_fn(
    model: TrainableModel,
    step: int,
    _config: None,
    *,
    scenarios: list[dict[str, str]],
) -> list[Trajectory]:
    """One completion per scenario, in turn, from the policy at `step`."""
    client = model.openai_client()
    policy = model.get_inference_name(step)
    trajectories: list[Trajectory] = []
    for scenario in scenarios:
        messages = _messages(scenario)
        response = await client.chat.completions.create(
            messages=messages, model=policy, max_tokens=MAX_TOKENS, n=1
        )
        choice = response.choices[0]
        trajectories.append(
            Trajectory(
                messages_and_choices=[*messages, choice],
                reward=reward_for_answer(choice.message.content or ""),
            )
        )
    return trajectories


async def rollout_fn(
    model: TrainableModel, scenario: dict[str, str], _config: Any
) -> TrajectoryGroup:
    """One chat request with `n=ROLLOUTS_PER_SCENARIO`: each of its choices is a rollout of
    the group, scored by `reward_for_answer`."""
    messages = _messages(scenario)
    response = await model.openai_client().chat.completions.create(
        messages=messages,
        model=model.get_inference_name(),
        max_tokens=MAX_TOKENS,
        n=ROLLOUTS_PER_SCENARIO,
    )
    return TrajectoryGroup(
        [
            Trajectory(
                messages_and_choices=[*messages, choice],
                reward=reward_for_answer(choice.message.content or ""),
            )
            for choice in response.choices
        ]
    )


def make_trainer(
    model: TrainableModel,
    backend: TrainingBackend,
    scenarios: Iterable[dict[str, str]],
    eval_scenarios: list[dict[str, str]],
    *,
    max_steps: int = MAX_STEPS,
    **settings: Any,
) -> PipelineTrainer[TrainableModel, dict[str, str], None]:
    """ART's trainer settings for this example (learning rate 5e-5, CISPO, an evaluation every
    `EVAL_EVERY_N_STEPS` steps and none at the start); `settings` adds or overrides any."""
    options: dict[str, Any] = {
        "learning_rate": 5e-5,
        "loss_fn": "cispo",
        "eval_every_n_steps": EVAL_EVERY_N_STEPS,
        "eval_at_start": False,
        **settings,
    }
    return PipelineTrainer(
        model,
        backend,
        rollout_fn,
        scenarios,
        None,
        partial(eval_fn, scenarios=eval_scenarios),
        max_steps=max_steps,
        **options,
    )


async def main() -> None:
    runtime.load_env_file()
    kind = runtime.backend_kind()
    base_model = runtime.base_model(kind, BASE_MODEL)
    model_name = f"{MODEL_NAME}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"

    print(f"Initializing {'TinkerBackend' if kind == 'tinker' else 'LocalBackend'}")
    backend = runtime.make_backend(kind)
    try:
        print(f"Initializing TrainableModel: {model_name} ({base_model})")
        model = TrainableModel(
            name=model_name, run_name=model_name, project=PROJECT, base_model=base_model
        )
        try:
            print("Registering model with backend")
            await model.register(backend)
            print("Model registered")

            base_scenarios = build_scenarios()
            trainer = make_trainer(
                model, backend, cycle(base_scenarios), base_scenarios[:EVAL_TRAJECTORY_COUNT]
            )
            print(
                f"Training {model_name}: {MAX_STEPS} steps, "
                f"{len(base_scenarios)} unique scenarios (cycling)"
            )
            await trainer.train()
        finally:
            await model.close()
    finally:
        await backend.close()


if __name__ == "__main__":
    runtime.run_example(main)
