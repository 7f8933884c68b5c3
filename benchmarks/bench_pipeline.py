"""PipelineTrainer against the synchronous loop, in one run, on the tiny model (LocalBackend,
torch engine, CPU).

Speed. Each rollout is a real chat completion from the served step, then a scripted wait that
stands for the environment (a tool, a judge, a user): 50 ms for 90% of rollouts and 500 ms for
10%, drawn from a seeded generator per (scenario, rollout), so both loops wait the same. A step
is 8 scenarios x 8 rollouts; rewards differ within every group, so no group is discarded for
equal rewards. The synchronous loop is the one users write: gather the step's 64 rollouts,
then `model.train`. The pipeline is `PipelineTrainer` with batches of exactly 8 groups, 16
rollout workers and `max_steps_off_policy=4`. Reported: wall time of the steps (after
`register`, so model loading is left out), seconds per step, and the trainer idle ratio: the
share of the wall time the trainer waited for a batch (the synchronous loop: its gathers). The
two loops alternate (`--repeats`) so machine load drifts hit both.

Learning. The demo's task (`arthex demo`) run both ways for `--demo-steps` steps per seed. Each
rollout's reward is recorded with the step that served it, and a loop reaches the target at the
first step whose rollouts' mean reward is at least `--target`: the same measure for both (the
pipeline's own train/reward leaves out the groups it discards, so it is not used).

    python -m benchmarks pipeline                # both parts
    python -m benchmarks.bench_pipeline --skip-learning --steps 10
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import random
import shutil
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from unittest import mock

import attrs

from arthex.adapters.local import LocalBackend
from arthex.apps.demo import rl as demo_module
from arthex.apps.demo import task as demo_task
from arthex.apps.demo.task import quiet_transformers
from arthex.composition.api import TrainableModel
from arthex.core.config import TrainConfig
from arthex.core.gather import gather_trajectory_groups
from arthex.core.pipeline import PipelineTrainer
from arthex.core.trajectories import Trajectory, TrajectoryGroup
from arthex.testing.builders import make_choice
from arthex.testing.tiny_model import tiny_model

from ._table import print_table

FAST_S, SLOW_S, SLOW_SHARE = 0.05, 0.5, 0.1
MESSAGES: list[dict[str, Any]] = [{"role": "user", "content": "What is two plus two?"}]
PROMPT = list(range(1, 20))  # made-up prompt tokens for `--sources scripted`


def scripted_wait(scenario: int, rollout: int, seed: int) -> float:
    draw = random.Random(f"{seed}/{scenario}/{rollout}").random()
    return SLOW_S if draw < SLOW_SHARE else FAST_S


@attrs.frozen
class SpeedRun:
    mode: str
    wall_s: float
    steps: int
    trainer_idle_s: float

    @property
    def idle_ratio(self) -> float:
        return self.trainer_idle_s / self.wall_s


def _rollout_fn(model: TrainableModel, args: argparse.Namespace) -> Any:
    """One scenario's rollouts: `--rollouts` completions of the served step (one request
    asking for n of them, which the engine samples as one batch), then the scripted waits:
    the rollouts run side by side, so the group takes its longest wait. `--sources scripted`
    leaves the engine out: the completions are made up (fixed tokens and logprobs), so only
    the waits and the updates take time."""
    client = model.openai_client()
    rollouts = args.rollouts

    async def group(model: Any, scenario: int, config: object) -> TrajectoryGroup:
        if args.source == "served":
            response = await client.chat.completions.create(
                model=model.get_inference_name(),
                messages=MESSAGES,  # type: ignore[arg-type]
                max_tokens=args.max_tokens,
                logprobs=True,
                temperature=1.0,
                n=rollouts,
            )
            choices: list[Any] = list(response.choices)
        else:
            choices = [
                make_choice("12ab", token_ids=[40 + i, 41, 42, 43], prompt_token_ids=PROMPT)
                for i in range(rollouts)
            ]
        await asyncio.sleep(max(scripted_wait(scenario, k, args.seed) for k in range(rollouts)))
        trajectories = []
        for position, choice in enumerate(choices):
            text = choice.message.content or ""
            digits = sum(c.isdigit() for c in text) / (len(text) + 1)
            trajectories.append(
                Trajectory(
                    messages_and_choices=[*MESSAGES, choice], reward=float(position) + digits
                )
            )
        return TrajectoryGroup(trajectories)

    return group


async def _speed(mode: str, base_model: str, root: Path, args: argparse.Namespace) -> SpeedRun:
    model = TrainableModel(
        name=f"{mode}-{time.monotonic_ns()}",
        project="bench",
        base_model=base_model,
        base_path=str(root),
        report_metrics=[],
    )
    backend = LocalBackend(engine="torch", full_finetune=True, seed=args.seed)
    try:
        await model.register(backend)
        rollout = _rollout_fn(model, args)
        started = time.monotonic()
        if mode == "synchronous":
            idle = 0.0
            config = TrainConfig(learning_rate=args.learning_rate)
            for step in range(args.steps):
                gathering = time.monotonic()
                first = step * args.scenarios
                groups = await gather_trajectory_groups(
                    (rollout(model, s, None) for s in range(first, first + args.scenarios)),
                    progress=False,
                )
                idle += time.monotonic() - gathering
                await model.train(groups, config, progress=False)
        else:
            trainer = PipelineTrainer(
                model,
                backend,
                rollout,
                itertools.count(),
                None,
                num_rollout_workers=2 * args.scenarios,
                min_batch_size=args.scenarios,
                max_batch_size=args.scenarios,
                max_steps_off_policy=args.max_steps_off_policy,
                learning_rate=args.learning_rate,
                max_steps=args.steps,
                eval_fn=None,
                resume=False,
            )
            await trainer.train()
            rows = await model.history()
            idle = sum(r.values.get("time/step_collect_batch_s") or 0.0 for r in rows)
        wall = time.monotonic() - started
        return SpeedRun(mode, wall, await model.get_step(), idle)
    finally:
        await backend.close()
        await model.close()


def speed(base_model: str, root: Path, args: argparse.Namespace) -> None:
    runs: list[SpeedRun] = []
    for repeat in range(args.repeats):
        order = ("synchronous", "pipeline") if repeat % 2 == 0 else ("pipeline", "synchronous")
        for mode in order:
            runs.append(asyncio.run(_speed(mode, base_model, root, args)))
            print(
                f"  {args.source} {mode}: {runs[-1].wall_s:.1f}s for {runs[-1].steps} steps",
                flush=True,
            )
    rows: list[list[object]] = []
    walls: dict[str, float] = {}
    for mode in ("synchronous", "pipeline"):
        mine = [r for r in runs if r.mode == mode]
        walls[mode] = statistics.median(r.wall_s for r in mine)
        rows.append(
            [
                mode,
                walls[mode],
                walls[mode] / args.steps,
                statistics.median(r.idle_ratio for r in mine),
            ]
        )
    ratio = walls["synchronous"] / walls["pipeline"]
    rows.append(["speed-up (synchronous / pipeline wall)", ratio, "", "target >= 1.5"])
    rows.append(["load average after (1, 5, 15 min)", *[f"{x:.1f}" for x in os.getloadavg()]])
    print_table(
        f"Pipeline vs synchronous, {args.source} completions: {args.steps} steps of "
        f"{args.scenarios} scenarios x {args.rollouts} rollouts, rollout waits "
        f"{FAST_S * 1000:.0f} ms (90%) / {SLOW_S * 1000:.0f} ms (10%), median of {args.repeats}",
        ["loop", "wall s", "s / step", "trainer idle ratio"],
        rows,
    )


def learning(root: Path, args: argparse.Namespace) -> None:
    rows: list[list[object]] = []
    reached: dict[str, list[int]] = {"synchronous": [], "pipeline": []}
    original = demo_task.rollout
    for seed in range(args.demo_seeds):
        for mode in ("synchronous", "pipeline"):
            rewards: dict[int, list[float]] = defaultdict(list)
            # run_demo samples through the rollout its module imported: record it there
            with mock.patch.object(demo_module, "rollout", _recording(original, rewards)):
                asyncio.run(
                    demo_module.run_demo(
                        str(root / f"demo-{mode}-{seed}"),
                        steps=args.demo_steps,
                        seed=seed,
                        progress=False,
                        pipeline=mode == "pipeline",
                    )
                )
            means = {step: statistics.fmean(values) for step, values in rewards.items()}
            step = next((s for s in sorted(means) if means[s] >= args.target), None)
            reached[mode].append(step if step is not None else args.demo_steps + 1)
            rows.append([seed, mode, step if step is not None else "not reached"])
            print(f"  demo seed {seed} {mode}: target at step {step}", flush=True)
    sync, pipe = (statistics.fmean(reached[m]) for m in ("synchronous", "pipeline"))
    rows.append(["mean", "synchronous / pipeline", f"{sync:.2f} / {pipe:.2f}"])
    rows.append(["ratio", "pipeline / synchronous steps", f"{pipe / sync:.2f} (target <= 1.25)"])
    print_table(
        f"Demo task: first step whose rollouts' mean reward >= {args.target} "
        f"(pipeline at most {demo_module.PIPELINE_STEPS_OFF_POLICY} step off policy)",
        ["seed", "loop", "step"],
        rows,
    )


def _recording(original: Any, rewards: dict[int, list[float]]) -> Any:
    """The demo's rollout, also keeping each reward under the step that served it."""

    async def recorded(client: Any, policy: str, prompt: str, seed: int) -> Trajectory:
        trajectory: Trajectory = await original(client, policy, prompt, seed)
        rewards[int(policy.rsplit("@", 1)[1])].append(trajectory.reward)
        return trajectory

    return recorded


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_pipeline")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--scenarios", type=int, default=8, help="scenarios (groups) per step")
    parser.add_argument("--rollouts", type=int, default=8, help="rollouts per scenario")
    parser.add_argument("--max-tokens", type=int, default=4)
    parser.add_argument(
        "--sources",
        default="scripted,served",
        help="comma-separated: scripted (made-up completions), served (the tiny model's)",
    )
    parser.add_argument("--max-steps-off-policy", type=int, default=4)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the trainer")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--demo-steps", type=int, default=16)
    parser.add_argument("--demo-seeds", type=int, default=3)
    parser.add_argument("--target", type=float, default=0.5)
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--skip-learning", action="store_true")
    args = parser.parse_args(argv if argv is not None else [])
    import torch

    torch.set_num_threads(args.threads)
    quiet_transformers()
    root = Path(tempfile.mkdtemp(prefix="bench-pipeline-"))
    try:
        base_model = tiny_model(root / "tiny")
        if not args.skip_speed:
            for source in args.sources.split(","):
                speed(base_model, root, argparse.Namespace(**{**vars(args), "source": source}))
        if not args.skip_learning:
            learning(root, args)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
