"""An environment for the evaluation tests, importable as `tests._eval_env:FACTORY`.

Each example asks the served model a question through `model.openai_client()`; the rule
scores the completion it sampled: reward 1 when the first sampled token id is even, else 0.
The rollout records the name it asked for and the tokens it got, so a test sees which step
answered. `failing` examples raise in every rollout, as a broken environment episode would.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from arthex.core.model import Model
from arthex.core.trajectories import Trajectory


@attrs.frozen
class Question:
    index: int
    prompt: str


class ParityEnvironment:
    def __init__(
        self,
        examples: int = 4,
        *,
        temperature: float = 1.0,
        max_tokens: int = 4,
        failing: Sequence[int] = (),
    ) -> None:
        self.examples = examples
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.failing = set(failing)

    def scenarios(self, split: str) -> Sequence[Question]:
        return [Question(i, f"Question {i}: count to {i + 3}.") for i in range(self.examples)]

    async def rollout(self, model: Model, scenario: Question) -> Trajectory:
        if scenario.index in self.failing:
            raise RuntimeError(f"the episode of example {scenario.index} broke")
        messages: list[Any] = [{"role": "user", "content": scenario.prompt}]
        name = model.get_inference_name()
        response = await model.openai_client().chat.completions.create(
            model=name,
            messages=messages,
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            logprobs=True,
        )
        choice = response.choices[0]
        token_ids = list((choice.model_extra or {})["token_ids"])
        assert choice.logprobs is not None and choice.logprobs.content is not None
        return Trajectory(
            messages_and_choices=[*messages, choice],
            reward=1.0 if token_ids[0] % 2 == 0 else 0.0,
            metrics={
                "completion_tokens": len(token_ids),
                "logprob": sum(t.logprob for t in choice.logprobs.content),
            },
            metadata={"served": name, "tokens": " ".join(map(str, token_ids))},
        )


def make() -> ParityEnvironment:
    """The factory `arthex eval --env tests._eval_env:make` calls."""
    return ParityEnvironment(examples=3)


def greedy() -> ParityEnvironment:
    return ParityEnvironment(examples=2, temperature=0.0)


def not_an_environment() -> object:
    return {"scenarios": "no"}


def broken() -> ParityEnvironment:
    raise RuntimeError("the factory could not build its dataset")
