"""tinker-cookbook's RL recipe (`tinker_cookbook.rl.train.main`: rollouts by the cookbook's
sampler, group-centred advantages, the `importance_sampling` loss), unmodified, on an
in-memory task built with the cookbook's own classes. Executed by the cookbook's venv, with
TINKER_BASE_URL and TINKER_API_KEY naming the server.

The task: a single-turn `Env` whose prompt is rendered by the cookbook's `role_colon` renderer
and whose reward is the share of the response's tokens that have an even id. Half the
vocabulary earns reward, so a random-weight model starts near 0.5 with a spread in every
group, and the policy gradient has something to climb: the recipe's `env/all/reward/total`
(in its `metrics.jsonl`) should rise over the steps. Every batch holds the same few prompts
(an `RLDataset` of `EnvGroupBuilder`s, made by an `RLDatasetBuilder`).

stdin: {"model": the model folder, "log_path", "steps", "groups", "group_size", "max_tokens",
        "learning_rate", "lora_rank"}
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import chz
import tinker
from tinker_cookbook import renderers
from tinker_cookbook.completers import StopCondition
from tinker_cookbook.rl import train
from tinker_cookbook.rl.types import (
    Action,
    ActionExtra,
    Env,
    EnvGroupBuilder,
    Observation,
    RLDataset,
    RLDatasetBuilder,
    StepResult,
)
from tinker_cookbook.tokenizer_utils import get_tokenizer

PROMPTS = ["Count from one to ten.", "What is two plus two?", "Say yes or no.", "Hello!"]
RENDERER = "role_colon"


class EvenTokens(Env):
    """One reply to `prompt`; its reward is the share of its tokens with an even id."""

    def __init__(self, renderer: renderers.Renderer, prompt: str) -> None:
        self.renderer = renderer
        self.prompt = prompt

    async def initial_observation(self) -> tuple[Observation, StopCondition]:
        messages: list[renderers.Message] = [{"role": "user", "content": self.prompt}]
        return self.renderer.build_generation_prompt(messages), self.renderer.get_stop_sequences()

    async def step(self, action: Action, *, extra: ActionExtra | None = None) -> StepResult:
        even = sum(1 for token in action if token % 2 == 0) / max(len(action), 1)
        return StepResult(
            reward=even,
            episode_done=True,
            next_observation=tinker.ModelInput.empty(),
            next_stop_condition=self.renderer.get_stop_sequences(),
            metrics={"even_share": even},
        )


@dataclass(frozen=True)
class EvenTokensGroup(EnvGroupBuilder):
    model: str
    prompt: str
    size: int

    async def make_envs(self) -> Sequence[Env]:
        renderer = renderers.get_renderer(RENDERER, get_tokenizer(self.model))
        return [EvenTokens(renderer, self.prompt) for _ in range(self.size)]

    def logging_tags(self) -> list[str]:
        return ["even_tokens"]


class EvenTokensDataset(RLDataset):
    def __init__(self, model: str, steps: int, groups: int, group_size: int) -> None:
        self.model, self.steps, self.groups, self.group_size = model, steps, groups, group_size

    def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        return [
            EvenTokensGroup(self.model, PROMPTS[i % len(PROMPTS)], self.group_size)
            for i in range(self.groups)
        ]

    def __len__(self) -> int:
        return self.steps


@chz.chz
class EvenTokensBuilder(RLDatasetBuilder):
    model: str
    steps: int
    groups: int
    group_size: int

    async def __call__(self) -> tuple[RLDataset, RLDataset | None]:
        return EvenTokensDataset(self.model, self.steps, self.groups, self.group_size), None


def main() -> None:
    payload = json.load(sys.stdin)
    model = payload["model"]
    config = train.Config(
        learning_rate=payload["learning_rate"],
        dataset_builder=EvenTokensBuilder(
            model=model,
            steps=payload["steps"],
            groups=payload["groups"],
            group_size=payload["group_size"],
        ),
        model_name=model,
        recipe_name="arthex_interop_rl",
        max_tokens=payload["max_tokens"],
        log_path=payload["log_path"],
        renderer_name=RENDERER,
        lora_rank=payload["lora_rank"],
        eval_every=0,
        save_every=0,
    )
    asyncio.run(train.main(config))


if __name__ == "__main__":
    main()
