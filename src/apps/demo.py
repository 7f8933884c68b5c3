"""`arthex demo`: RL on the tiny local model, on CPU, in about a minute. `arthex demo --sft`:
the whole life of a model (`run_sft_demo`, at the end of this module).

The task: "answer with digits". The reward is the share of the reply's visible characters
that are digits. The tiny model starts with random weights, so its replies are random tokens
of its small vocabulary, few of them digits: it rarely earns the reward. Group-relative RL
rewards the replies that happened to hold more digits than their siblings, and within a few
dozen steps the model answers mostly in digits.

Everything goes through the real loop a user writes: rollouts with `model.openai_client()`
against the local inference server, `gather_trajectory_groups`, `model.train`,
`model.delete_checkpoints`.

Its lines count steps as the history does: `step 4  reward 0.312  -> step 5: loss +0.021`
is the reward of the rollouts logged at step 4 (sampled from checkpoint 4) and the loss of the
update that made step 5; a step whose groups all have equal rewards says it had nothing to
train, and why.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import attrs

from ..adapters.layout import RunLayout
from ..core.config import TrainConfig
from ..core.gather import gather_trajectory_groups
from ..core.metrics import STEP_NUM_GROUPS_TRAINABLE, is_trainable_group
from ..core.training_row import GRADIENT_STEPS_KEY
from ..core.trajectories import Trajectory, TrajectoryGroup, trajectory_group

if TYPE_CHECKING:
    from ..adapters.local import LocalBackend
    from ..composition.api import TrainableModel

PROMPTS: tuple[str, ...] = (
    "What is two plus two?",
    "Count from one to ten.",
    "Guess the secret number.",
    "How many days are in a week?",
)
ROLLOUTS_PER_PROMPT = 8
MAX_TOKENS = 8
LEARNING_RATE = 3e-2
DEFAULT_STEPS = 20
PIPELINE_STEPS_OFF_POLICY = 1
ALL_EQUAL = "all rewards equal in every group"


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


def digit_share(text: str) -> float:
    """Digits among the visible (non-space) characters; 0 for an empty reply."""
    visible = [c for c in text if not c.isspace()]
    if not visible:
        return 0.0
    return sum(c in "0123456789" for c in visible) / len(visible)


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
    model, backend = _demo_run(base_path, "digits", seed)
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
            return _finish(rewards, started, base_path, model, out, show)
        config = TrainConfig(learning_rate=LEARNING_RATE)
        for step in range(steps):
            policy = model.get_inference_name()
            groups = await gather_trajectory_groups(
                (
                    trajectory_group(
                        _rollout(client, policy, prompt, _seed(seed, step, p, r))
                        for r in range(ROLLOUTS_PER_PROMPT)
                    )
                    for p, prompt in enumerate(PROMPTS)
                ),
                pbar_desc=f"step {step} rollouts",
                progress=True if progress else None if show else False,
            )
            reward = _mean_reward(groups)
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
    scenarios of `steps` steps, and the run ends early when they are used up."""
    from ..composition.api import PipelineTrainer
    from ..core.pipeline import make_group_rollout_fn

    counter = itertools.count()

    async def single(model: Any, scenario: int, config: None) -> Trajectory:
        prompt = PROMPTS[scenario % len(PROMPTS)]
        return await _rollout(
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
        range(steps * len(PROMPTS) * 2),
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


def _demo_run(base_path: str, prefix: str, seed: int) -> tuple[TrainableModel, LocalBackend]:
    """A new run of the tiny model (made on first use) on a CPU LocalBackend, fully trained."""
    from ..adapters.local import LocalBackend
    from ..composition.api import TrainableModel
    from ..testing.tiny_model import tiny_model

    _quiet_transformers()
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    model = TrainableModel(
        name=f"{prefix}-{stamp}-{os.getpid()}",
        project="demo",
        base_model=tiny_model(Path(base_path) / "_tiny_model"),
        base_path=base_path,
        report_metrics=[],
    )
    return model, LocalBackend(engine="torch", full_finetune=True, seed=seed)


async def _rollout(client: Any, policy: str, prompt: str, seed: int) -> Trajectory:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Answer with digits only."},
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


def _seed(seed: int, step: int, prompt: int, rollout: int) -> int:
    return ((seed * 10_007 + step) * 101 + prompt) * 1_009 + rollout


def _mean_reward(groups: Sequence[TrajectoryGroup]) -> float:
    rewards = [t.reward for g in groups for t in g.trajectories]
    return sum(rewards) / len(rewards) if rewards else 0.0


def _bar(done: int, total: int, width: int = 20) -> str:
    filled = width * done // total
    return f"[{'#' * filled}{'.' * (width - filled)}]"


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


def _quiet_transformers() -> None:
    """Loading a checkpoint every step would print a progress bar every step."""
    try:
        from transformers.utils import logging as hf_logging_module
    except ImportError:
        return
    hf_logging: Any = hf_logging_module  # untyped
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


# --- the whole life: SFT warm start, RL, export, load without arthex ---------------------------

SFT_ANSWERS: tuple[str, ...] = ("4", "1 2 3 4 5 6 7 8 9 10", "42", "7")
SFT_LEARNING_RATE = 1e-2
SFT_EPOCHS = 40
SFT_RL_STEPS = 5
SFT_RL_LEARNING_RATE = 1e-3
SYSTEM = "Answer with digits only."

# The start of a script for a clean interpreter (`python -I`) that refuses to import arthex:
# what follows it shows that an export stands on its own.
WITHOUT_ARTHEX = r"""
import importlib.abc, json, sys

class NoArthex(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "arthex" or name.startswith("arthex."):
            raise ImportError("the exported model must load without arthex")

sys.meta_path.insert(0, NoArthex())
"""
# Prints the greedy reply to the first prompt, rendered by the export's own template.
_LOAD_WITHOUT_ARTHEX = (
    WITHOUT_ARTHEX
    + r"""
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

folder, messages = sys.argv[1], json.loads(sys.argv[2])
tokenizer = AutoTokenizer.from_pretrained(folder)
model = AutoModelForCausalLM.from_pretrained(folder)
prompt = tokenizer.apply_chat_template(
    messages, add_generation_prompt=True, tokenize=True, return_dict=False
)
with torch.no_grad():
    out = model.generate(torch.tensor([prompt]), max_new_tokens=16, do_sample=False,
                         pad_token_id=tokenizer.pad_token_id)
print(json.dumps(tokenizer.decode(out[0, len(prompt):], skip_special_tokens=True)))
"""
)


@attrs.frozen
class LifeResult:
    """Greedy reward at each stage, where the export is, and the first prompt's greedy reply
    from the served model and from the export loaded by plain transformers."""

    base_reward: float
    sft_reward: float
    rl_reward: float
    export_dir: str
    served_reply: str
    exported_reply: str
    seconds: float


async def run_sft_demo(
    base_path: str = ".art",
    seed: int = 0,
    *,
    rl_steps: int = SFT_RL_STEPS,
    stream: TextIO | None = None,
    quiet: bool = False,
) -> LifeResult:
    """A model's whole life on CPU: supervised warm start on digit answers, a few RL steps,
    export as a merged Hugging Face model, and a load of that export by plain transformers in
    a process without arthex, whose greedy reply must be the served one."""
    from ..core.sft import TrainSFTConfig

    out = stream if stream is not None else sys.stdout
    started = time.monotonic()

    def say(line: str) -> None:
        if not quiet:
            out.write(line + "\n")
            out.flush()

    model, backend = _demo_run(base_path, "life", seed)
    client: Any = None
    try:
        await model.register(backend)
        client = model.openai_client()
        base_reward = await _greedy_reward(model, client)
        say(f"step 0 (base model): greedy reward {base_reward:.3f}")
        data = [
            [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": prompt},
                {"role": "assistant", "content": answer},
            ]
            for prompt, answer in zip(PROMPTS, SFT_ANSWERS, strict=True)
        ]
        sft = TrainSFTConfig(
            learning_rate=SFT_LEARNING_RATE, epochs=SFT_EPOCHS, batch_size=len(data)
        )
        result = await model.train_sft(data, sft, progress=False)
        sft_reward = await _greedy_reward(model, client)
        loss = result.metrics.get("loss/train")
        shown = "n/a" if loss is None else f"{loss:+.3f}"
        say(
            f"step 0 -> {result.step}: SFT ({SFT_EPOCHS} epochs), loss {shown}; "
            f"step {result.step} (after SFT): greedy reward {sft_reward:.3f}"
        )
        config = TrainConfig(learning_rate=SFT_RL_LEARNING_RATE)
        for step in range(rl_steps):
            groups = await gather_trajectory_groups(
                (
                    trajectory_group(
                        _rollout(
                            client, model.get_inference_name(), prompt, _seed(seed, step, p, r)
                        )
                        for r in range(ROLLOUTS_PER_PROMPT)
                    )
                    for p, prompt in enumerate(PROMPTS)
                ),
                progress=False,
            )
            trained = await model.train(groups, config=config, progress=False)
            trainable = sum(is_trainable_group(g) for g in groups)
            reward = _mean_reward(groups)
            say(f"{step_line(trained.step - 1, reward, trained.metrics, trainable)} (RL)")
        rl_reward = await _greedy_reward(model, client)
        say(f"step {await model.get_step()} (after RL): greedy reward {rl_reward:.3f}")
        export_dir = await model.export(str(RunLayout.of(base_path, model.run).file("export")))
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": PROMPTS[0]}]
        served = await _greedy_reply(model, client, messages)
    finally:
        if client is not None:
            await client.close()
        await backend.close()
        await model.close()
    exported = await asyncio.to_thread(_reply_without_arthex, export_dir, messages)
    say(f"exported to {export_dir}")
    say(f"{PROMPTS[0]!r}: served {served!r}, loaded by plain transformers {exported!r}")
    life = LifeResult(
        base_reward=base_reward,
        sft_reward=sft_reward,
        rl_reward=rl_reward,
        export_dir=export_dir,
        served_reply=served,
        exported_reply=exported,
        seconds=time.monotonic() - started,
    )
    say(f"done in {life.seconds:.0f}s")
    return life


async def _greedy_reply(model: Any, client: Any, messages: list[dict[str, Any]]) -> str:
    response = await client.chat.completions.create(
        model=model.get_inference_name(), messages=messages, max_tokens=16, temperature=0
    )
    return str(response.choices[0].message.content or "")


async def _greedy_reward(model: Any, client: Any) -> float:
    replies = [
        await _greedy_reply(
            model, client, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": p}]
        )
        for p in PROMPTS
    ]
    return sum(digit_share(reply) for reply in replies) / len(replies)


def _reply_without_arthex(folder: str, messages: list[dict[str, Any]]) -> str:
    result = subprocess.run(
        [sys.executable, "-I", "-c", _LOAD_WITHOUT_ARTHEX, folder, json.dumps(messages)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"loading the export with transformers failed:\n{result.stderr[-2000:]}")
    reply: str = json.loads(result.stdout.strip().splitlines()[-1])
    return reply
