"""Train on a verifiers environment: arthex runs the environment's own episodes and scoring,
and trains the model on exactly the tokens it sampled. Small enough for a laptop CPU.

The environment is a verifiers (0.4, `verifiers.v1`) taskset built from an in-memory dataset,
a task whose `@vf.reward` functions score the model's reply, and a harness that runs
in-process (verifiers' `subprocess` runtime: nothing remote, nothing downloaded). It is
evaluated (`arthex.evaluate`: mean reward and pass@k over the eval tasks) before training,
trained for a few steps on groups of rollouts, and evaluated again.

The model is arthex's tiny test model (random weights, made on the spot), so expect the loop to
run, not the model to learn arithmetic: swap `base_model` for a real instruct model on a GPU.

    pip install "arthex[local,envs]"        # in a venv of its own: verifiers pins openai<3
    python examples/verifiers_env.py --steps 3

Settings can also come from the environment: ARTHEX_EXAMPLE_STEPS, ARTHEX_EXAMPLE_BASE_PATH.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

import datasets
import verifiers.v1 as vf
from openai import AsyncOpenAI

import arthex
from arthex.environments import from_verifiers, rollout_fn
from arthex.testing.tiny_model import tiny_model

TRAIN = [{"question": f"What is {a} plus {b}?", "answer": str(a + b)} for a, b in
         [(1, 2), (2, 2), (3, 1), (4, 3), (5, 2), (6, 1)]]  # fmt: skip
EVAL = [{"question": f"What is {a} plus {b}?", "answer": str(a + b)} for a, b in
        [(2, 3), (1, 1), (4, 4)]]  # fmt: skip


# --- the verifiers environment: data, scoring, and the program that asks the model ----------


class SumData(vf.TaskData):
    answer: str


class SumTask(vf.Task[SumData, vf.State, vf.TaskConfig]):
    @vf.reward
    async def correct(self, task: SumData, trace: vf.Trace) -> float:
        return 1.0 if task.answer in trace.last_reply else 0.0

    @vf.reward(weight=0.5)
    async def concise(self, trace: vf.Trace) -> float:
        return 1.0 / (1.0 + len(trace.last_reply))


def tasks(rows: list[dict[str, str]], config: Any) -> Any:
    for row in datasets.Dataset.from_list(rows):
        yield SumTask(SumData(prompt=row["question"], answer=row["answer"]), config)


class SumTrain(vf.Taskset[SumTask, vf.TasksetConfig]):
    def load(self) -> Any:
        return tasks(TRAIN, self.config.task)


class SumEval(vf.Taskset[SumTask, vf.TasksetConfig]):
    def load(self) -> Any:
        return tasks(EVAL, self.config.task)


class AskOnce(vf.Harness[vf.HarnessConfig]):
    """The program: one question to the model, through verifiers' interception endpoint."""

    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(self, ctx: Any, trace: Any, runtime: Any, endpoint: str, secret: str,
                     mcp_urls: Any, data: Any) -> Any:  # fmt: skip
        async with AsyncOpenAI(base_url=endpoint, api_key=secret, max_retries=0) as client:
            await client.chat.completions.create(
                model=ctx.model, messages=[{"role": "user", "content": data.prompt_text}]
            )
        return vf.ProgramResult(exit_code=0, stdout="", stderr="")


def load(taskset: type[vf.Taskset[Any, Any]]) -> Any:
    """verifiers finds a taskset (and its default harness) by module name: an installed
    package, or here a module made of this script's classes."""
    name = f"arthex_example_{taskset.__name__.lower()}"
    module = type(sys)(name)
    module.__dict__.update({taskset.__name__: taskset, "AskOnce": AskOnce})
    module.__all__ = [taskset.__name__, "AskOnce"]  # type: ignore[attr-defined]
    sys.modules[name] = module
    config = vf.SingleAgentEnvConfig(
        taskset=vf.TasksetConfig(id=name), agent=vf.AgentConfig(runtime=vf.SubprocessConfig())
    )
    return vf.load_environment(config)


# --- arthex: evaluate, train, evaluate ----------------------------------------------------------


async def main(steps: int, base_path: str) -> dict[str, Any]:
    from arthex.adapters.local import LocalBackend

    environment = from_verifiers(load(SumTrain), eval_env=load(SumEval), max_tokens=8,
                                 temperature=1.0)  # fmt: skip
    backend = LocalBackend(base_path)
    model = arthex.TrainableModel(
        name="sums", project="verifiers", base_model=tiny_model(Path(base_path) / "tiny"),
        base_path=base_path, report_metrics=[],
    )  # fmt: skip
    started = time.monotonic()
    try:
        await model.register(backend)
        evaluated = await arthex.evaluate(model, environment, rollouts_per_example=2)
        before = evaluated.reward
        print(f"before training: mean reward {before:.3f}, pass@2 {evaluated.pass_at_k[2]:.3f}")
        group_of = rollout_fn(environment, n=4)
        train = environment.scenarios("train")
        for step in range(steps):
            batch = [train[(2 * step + i) % len(train)] for i in range(2)]
            groups = await arthex.gather_trajectory_groups(
                group_of(model, task, None) for task in batch
            )
            result = await model.train(groups, config=arthex.TrainConfig(learning_rate=1e-3))
            rewards = [t.reward for g in groups for t in g.trajectories]
            print(f"step {result.step}: train reward {sum(rewards) / len(rewards):.3f}")
        evaluated = await arthex.evaluate(model, environment, rollouts_per_example=2)
        after = evaluated.reward
        print(f"after {steps} steps: mean reward {after:.3f}, pass@2 {evaluated.pass_at_k[2]:.3f}")
        return {"before": before, "after": after, "step": await model.get_step(),
                "seconds": time.monotonic() - started}  # fmt: skip
    finally:
        await model.close()
        await backend.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=int(os.environ.get("ARTHEX_EXAMPLE_STEPS", 3)))
    parser.add_argument("--base-path", default=os.environ.get("ARTHEX_EXAMPLE_BASE_PATH", ".art"))
    arguments = parser.parse_args()
    summary = asyncio.run(main(arguments.steps, arguments.base_path))
    print(f"done in {summary['seconds']:.1f} s")
