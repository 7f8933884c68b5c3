"""The demos' task: "answer with digits", on the tiny local model.

The reward is the share of the reply's visible characters that are digits. The tiny model
starts with random weights, so its replies are random tokens of its small vocabulary, few of
them digits: it rarely earns the reward. Group-relative RL rewards the replies that happened to
hold more digits than their siblings, and within a few dozen steps the model answers mostly in
digits. Rollouts go through the real loop a user writes: `model.openai_client()` against the
local inference server.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...core.gather import gather_trajectory_groups
from ...core.training_row import GRADIENT_STEPS_KEY
from ...core.trajectories import Trajectory, TrajectoryGroup, trajectory_group

if TYPE_CHECKING:
    from ...adapters.local import LocalBackend
    from ...composition.api import TrainableModel

PROMPTS: tuple[str, ...] = (
    "What is two plus two?",
    "Count from one to ten.",
    "Guess the secret number.",
    "How many days are in a week?",
)
SYSTEM = "Answer with digits only."
ROLLOUTS_PER_PROMPT = 8
MAX_TOKENS = 8
LEARNING_RATE = 3e-2
ALL_EQUAL = "all rewards equal in every group"


def digit_share(text: str) -> float:
    """Digits among the visible (non-space) characters; 0 for an empty reply."""
    visible = [c for c in text if not c.isspace()]
    if not visible:
        return 0.0
    return sum(c in "0123456789" for c in visible) / len(visible)


def demo_run(base_path: str, prefix: str, seed: int) -> tuple[TrainableModel, LocalBackend]:
    """A new run of the tiny model (made on first use) on a CPU LocalBackend, fully trained."""
    from ...adapters.local import LocalBackend
    from ...composition.api import TrainableModel
    from ...testing.tiny_model import tiny_model

    quiet_transformers()
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    model = TrainableModel(
        name=f"{prefix}-{stamp}-{os.getpid()}",
        project="demo",
        base_model=tiny_model(Path(base_path) / "_tiny_model"),
        base_path=base_path,
        report_metrics=[],
    )
    # The demos' own choices, not the user's: replies cut at MAX_TOKENS (digits need no
    # more), a tiny model whose early turns may be empty, a pipeline that runs as far ahead
    # as it is allowed, a task made to be solved within the run (its groups then tie). The
    # values stay in the history; no warning blames the user for them.
    model.run_diagnostics.expect("truncated", "empty", "staleness", "equal_rewards")
    return model, LocalBackend(engine="torch", full_finetune=True, seed=seed)


async def rollout(client: Any, policy: str, prompt: str, seed: int) -> Trajectory:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": prompt},
    ]
    response = await client.chat.completions.create(
        model=policy,
        messages=messages,
        max_tokens=MAX_TOKENS,
        temperature=1.0,
        logprobs=True,
        seed=seed,
    )
    choice = response.choices[0]
    return Trajectory(
        messages_and_choices=[*messages, choice],
        reward=digit_share(choice.message.content or ""),
    )


async def gather_step(
    client: Any, policy: str, seed: int, step: int, **options: Any
) -> list[TrajectoryGroup]:
    """One step's groups: `ROLLOUTS_PER_PROMPT` rollouts of `policy` per prompt (`options` go
    to `gather_trajectory_groups`: the progress bar's)."""
    return await gather_trajectory_groups(
        (
            trajectory_group(
                rollout(client, policy, prompt, rollout_seed(seed, step, p, r))
                for r in range(ROLLOUTS_PER_PROMPT)
            )
            for p, prompt in enumerate(PROMPTS)
        ),
        **options,
    )


def rollout_seed(seed: int, step: int, prompt: int, rollout: int) -> int:
    return ((seed * 10_007 + step) * 101 + prompt) * 1_009 + rollout


def mean_reward(groups: Sequence[TrajectoryGroup]) -> float:
    rewards = [t.reward for g in groups for t in g.trajectories]
    return sum(rewards) / len(rewards) if rewards else 0.0


def step_line(
    step: int, reward: float, update: Mapping[str, float | None], trainable: int | None
) -> str:
    """One step of the run, in the history's steps: the reward of the rollouts logged at
    `step`, and what the update on them (its training row, at step + 1) did. `trainable` is
    how many of the groups' rewards differ (None when unknown)."""
    loss = update.get("loss/train")
    if loss is not None and update.get(GRADIENT_STEPS_KEY) != 0:
        done = f"loss {loss:+.3f}"
    elif trainable == 0:
        done = f"nothing to train: {ALL_EQUAL}"
    else:
        done = "nothing to train: no trainable tokens in the batch"
    return f"step {step:>3}  reward {reward:.3f}  -> step {step + 1}: {done}"


def quiet_transformers() -> None:
    """Loading a checkpoint every step would print a progress bar every step."""
    try:
        from transformers.utils import logging as hf_logging_module
    except ImportError:
        return
    hf_logging: Any = hf_logging_module  # untyped
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
