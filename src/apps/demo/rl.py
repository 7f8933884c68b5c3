"""`arthex demo`: RL on the tiny local model, on CPU, in about a minute (`--pipeline`: the same
task through PipelineTrainer).

Everything goes through the real loop a user writes: rollouts with `model.openai_client()`
against the local inference server, `gather_trajectory_groups`, `model.train`,
`model.delete_checkpoints`.

Its lines count steps as the history does: `step 4  reward 0.312  -> step 5: loss +0.021`
is the reward of the rollouts logged at step 4 (sampled from checkpoint 4) and the loss of the
update that made step 5; a step whose groups all have equal rewards says it had nothing to
train, and why.
"""

from __future__ import annotations

import itertools
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any, TextIO

import attrs

from ...adapters.layout import RunLayout
from ...core.config import TrainConfig
from ...core.metrics import STEP_NUM_GROUPS_TRAINABLE, is_trainable_group
from ...core.trajectories import Trajectory
from .task import (
    LEARNING_RATE,
    PROMPTS,
    ROLLOUTS_PER_PROMPT,
    demo_run,
    gather_step,
    mean_reward,
    rollout,
    step_line,
)

DEFAULT_STEPS = 20
PIPELINE_STEPS_OFF_POLICY = 1
PIPELINE_STREAM_FACTOR = 2  # the pipeline demo's stream: scenarios for twice its steps


@attrs.frozen
class DemoResult:
    """The mean reward of the rollouts logged at each step (`rewards[n]`: history step n),
    and where the run's files are."""

    rewards: tuple[float, ...]
    seconds: float
    model_dir: str

    @property
    def first_reward(self) -> float:
        return self.rewards[0]

    @property
    def last3_mean(self) -> float:
        tail = self.rewards[-3:]
        return sum(tail) / len(tail)


async def run_demo(
    base_path: str = ".art",
    steps: int = DEFAULT_STEPS,
    seed: int = 0,
    progress: bool | None = None,
    *,
    stream: TextIO | None = None,
    pipeline: bool = False,
) -> DemoResult:
    """Train the tiny model for `steps` RL steps and return the reward per step.

    `pipeline=True` runs the same task through `PipelineTrainer`: rollouts of the next steps
    are sampled while a step trains (at most `PIPELINE_STEPS_OFF_POLICY` steps behind).
    `progress=None` prints one line per step and a summary; False prints nothing; True also
    shows the gather progress bar when the stream is not a terminal."""
    if steps < 3:
        raise ValueError(f"the demo needs at least 3 steps to compare, got {steps}")
    out = stream if stream is not None else sys.stdout
    show = progress is not False
    started = time.monotonic()
    model, backend = demo_run(base_path, "digits", seed)
    rewards: list[float] = []
    client: Any = None

    def report(
        step: int, reward: float, update: Mapping[str, float | None], trainable: int | None
    ) -> None:
        rewards.append(reward)
        if show:
            out.write(
                f"{_bar(len(rewards), steps)} {step_line(step, reward, update, trainable)}  "
                f"{time.monotonic() - started:5.1f}s\n"
            )
            out.flush()

    try:
        await model.register(backend)
        client = model.openai_client()
        if pipeline:
            await _pipeline(model, backend, client, steps, seed, report)
            if show and 0 < len(rewards) < steps:  # the bar ends at its total, saying why
                out.write(
                    f"{_bar(steps, steps)} done after {len(rewards)} of {steps} steps: the "
                    "model answers in digits, so its groups' rewards tie and teach nothing "
                    "more (they are discarded), and the stream is used up\n"
                )
            return _finish(rewards, started, base_path, model, out, show)
        config = TrainConfig(learning_rate=LEARNING_RATE)
        for step in range(steps):
            policy = model.get_inference_name()
            groups = await gather_step(
                client,
                policy,
                seed,
                step,
                pbar_desc=f"step {step} rollouts",
                progress=True if progress else None if show else False,
            )
            reward = mean_reward(groups)
            result = await model.train(groups, config=config)
            await model.delete_checkpoints(best_checkpoint_metric="train/reward")
            trainable = sum(is_trainable_group(g) for g in groups)
            report(step, reward, result.metrics, trainable)
    finally:
        if client is not None:
            await client.close()
        await backend.close()
        await model.close()
    return _finish(rewards, started, base_path, model, out, show)


def _finish(
    rewards: list[float], started: float, base_path: str, model: Any, out: TextIO, show: bool
) -> DemoResult:
    demo = DemoResult(
        rewards=tuple(rewards),
        seconds=time.monotonic() - started,
        model_dir=str(RunLayout.of(base_path, model.run).dir),
    )
    if show:
        last = len(rewards) - 1
        out.write(
            f"reward at step 0: {demo.first_reward:.3f}  mean of the last three steps "
            f"({max(0, last - 2)}-{last}): {demo.last3_mean:.3f}  ({demo.seconds:.0f}s, files "
            f"in {demo.model_dir})\n"
        )
        out.flush()
    return demo


async def _pipeline(
    model: Any,
    backend: Any,
    client: Any,
    steps: int,
    seed: int,
    report: Callable[[int, float, Mapping[str, float | None], int | None], None],
) -> None:
    """The demo's task through PipelineTrainer: the prompts in turn, one group of
    `ROLLOUTS_PER_PROMPT` rollouts per scenario, a step per `len(PROMPTS)` groups.

    Groups whose rollouts all earned the same reward teach nothing and are discarded (as in
    ART), so once the model answers in digits most groups are; the stream holds twice the
    scenarios of `steps` steps, and the run ends early when they are used up (the last line
    of the progress bar says so)."""
    from ...core.pipeline import PipelineTrainer, make_group_rollout_fn

    counter = itertools.count()

    async def single(model: Any, scenario: int, config: None) -> Trajectory:
        prompt = PROMPTS[scenario % len(PROMPTS)]
        return await rollout(
            client, model.get_inference_name(), prompt, seed * 7919 + next(counter)
        )

    def on_step(step: int, metrics: Mapping[str, float | None]) -> None:
        # `step` is the one the update made; its batch was logged at the step before.
        trainable = metrics.get(STEP_NUM_GROUPS_TRAINABLE)
        report(
            step - 1,
            metrics.get("train/reward") or 0.0,
            metrics,
            None if trainable is None else int(trainable),
        )

    trainer = PipelineTrainer(
        model,
        backend,
        make_group_rollout_fn(single, ROLLOUTS_PER_PROMPT),
        range(steps * len(PROMPTS) * PIPELINE_STREAM_FACTOR),
        None,
        num_rollout_workers=2 * len(PROMPTS),
        min_batch_size=len(PROMPTS),
        max_batch_size=len(PROMPTS),
        max_steps_off_policy=PIPELINE_STEPS_OFF_POLICY,
        learning_rate=LEARNING_RATE,
        max_steps=steps,
        checkpoint_retention=1,
        resume=False,
        on_step=on_step,
    )
    await trainer.train()


def _bar(done: int, total: int, width: int = 20) -> str:
    filled = width * done // total
    return f"[{'#' * filled}{'.' * (width - filled)}]"
