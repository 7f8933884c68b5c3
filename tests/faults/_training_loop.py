"""The tiny-model training loop, run in a child process by the kill/resume and soak tests.

It is the loop a user writes (see arthex/demo.py): rollouts through `model.openai_client()`,
`gather_trajectory_groups`, `model.train`, `model.log(split="val")`,
`model.delete_checkpoints`, with 2 groups of 2 rollouts of at most 4 tokens to stay fast.

Children are forked from a forkserver that imported torch and arthex once (`start_child`):
an interpreter that imports torch costs seconds, a fork of one that did costs milliseconds,
and the forkserver itself never ran a torch op, so its forks are safe.

With `serve_only` the child registers, reports its inference endpoint and serves until it is
killed: an inference server that can die mid-rollout.

The child reports every event to the parent over a pipe, so the parent can follow the loop
and time its SIGKILLs. `kill=(POINT, N)` makes the child SIGKILL itself the N-th time it
reaches POINT (counted in that child), at places a random signal rarely lands:

- `rollout`: the N-th chat completion came back, the step's other rollouts still in flight;
- `pack`: the backend starts packing: this step's train-split row and trajectories are
  written, the optimizer has not stepped;
- `before-publish`: the optimizer stepped, the checkpoint is not written yet;
- `save-optimizer`: mid checkpoint write: weights are in the temp folder, the optimizer not;
- `after-publish`: the checkpoint is durable, its training row not yet in the history;
- `mid-delete`: retention renamed a doomed step folder aside and has not removed it yet.
"""

from __future__ import annotations

import asyncio
import importlib
import multiprocessing
import os
import signal
import time
from collections.abc import Callable, Mapping
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

PROJECT = "faults"
NAME = "loop"
GROUPS = 2
ROLLOUTS = 2
MAX_TOKENS = 4
PROMPTS = ("What is two plus two?", "Count from one to ten.")
LEARNING_RATE = 1e-2

PRELOAD = [
    "torch",
    "transformers",
    "safetensors.torch",
    "psutil",
    "openai",
    "transformers.modeling_utils",
    "transformers.masking_utils",
    "transformers.activations",
    "transformers.core_model_loading",
    "transformers.integrations.accelerate",
    "transformers.models.auto.modeling_auto",
    "transformers.models.auto.tokenization_auto",
    "transformers.models.llama.modeling_llama",
    "transformers.generation.utils",
    "arthex.adapters.local.backend",
    "arthex.adapters.local.trainer",
    "arthex.adapters.local.packing",
    "arthex.adapters.inference.http_server",
    "arthex.adapters.inference.select",
    "arthex.adapters.inference.torch_engine",
    "arthex.adapters.parquet.store",
    "arthex.adapters.jsonl_history",
    "arthex.composition.api",
    __name__,
]


def model_dir(base_path: Path) -> Path:
    return base_path / PROJECT / "models" / NAME


def start_child(
    options: Mapping[str, Any],
    target: Callable[[dict[str, Any], Connection], None] | None = None,
    preload: list[str] | None = None,
) -> tuple[multiprocessing.process.BaseProcess, Connection]:
    """Fork a child running `target(options, events)` (default: this loop's `child_main`);
    return it and the read end of its events."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(preload or PRELOAD)
    receive, send = context.Pipe(duplex=False)
    process = context.Process(target=target or child_main, args=(dict(options), send), daemon=True)
    process.start()
    send.close()
    return process, receive


def reap(process: multiprocessing.process.BaseProcess, events: Connection) -> None:
    """Wait for a child to end (kill it if it will not) and close its pipe."""
    process.join(timeout=30)
    if process.is_alive():
        process.kill()
        process.join()
    events.close()


# --- the child ---------------------------------------------------------------------------


class Killer:
    """SIGKILL this process at the N-th arrival at one named point."""

    def __init__(self, point: str | None, count: int, events: Connection) -> None:
        self.point, self.left, self.events = point, count, events

    def reached(self, point: str) -> None:
        if point != self.point:
            return
        self.left -= 1
        if self.left == 0:
            self.events.send({"event": "self-kill", "point": point})
            os.kill(os.getpid(), signal.SIGKILL)

    def wrap(self, owner: Any, attr: str, point: str, *, after: bool = False) -> None:
        original: Callable[..., Any] = getattr(owner, attr)

        def hooked(*args: Any, **kwargs: Any) -> Any:
            if not after:
                self.reached(point)
            result = original(*args, **kwargs)
            if after:
                self.reached(point)
            return result

        setattr(owner, attr, hooked)


def install_hooks(killer: Killer) -> None:
    """Wrap the module attributes the backend looks up at call time; the code under test is
    unchanged, only a SIGKILL is added at one point."""
    from arthex.adapters.local import checkpoint_io as checkpoint_io_module
    from arthex.adapters.local import checkpoints as checkpoints_module
    from arthex.adapters.local import packing

    checkpoints: Any = checkpoints_module  # its attributes are replaced below
    tensors_io: Any = checkpoint_io_module
    killer.wrap(packing, "pack", "pack")
    killer.wrap(checkpoints, "publish", "before-publish")
    killer.wrap(tensors_io, "save_optimizer", "save-optimizer")
    killer.wrap(checkpoints, "publish", "after-publish", after=True)
    deleting = False
    delete_steps = checkpoints.delete_steps
    fsync_dir = checkpoints.fsync_dir

    def hooked_delete(*args: Any, **kwargs: Any) -> Any:
        nonlocal deleting
        deleting = True
        try:
            return delete_steps(*args, **kwargs)
        finally:
            deleting = False

    def hooked_fsync(directory: Path) -> None:
        fsync_dir(directory)
        if deleting:  # a doomed folder was just renamed aside; rmtree comes next
            killer.reached("mid-delete")

    checkpoints.delete_steps = hooked_delete
    checkpoints.fsync_dir = hooked_fsync


def child_main(options: dict[str, Any], events: Connection) -> None:
    kill = options.get("kill")
    killer = Killer(kill[0] if kill else None, kill[1] if kill else 0, events)
    install_hooks(killer)
    _quiet()
    asyncio.run(_loop(options, events, killer))


def _quiet() -> None:
    from transformers.utils import logging as hf_logging_module

    hf_logging: Any = hf_logging_module  # untyped
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


async def _rollout(
    client: Any, policy: str, prompt: str, index: int, seed: int, killer: Killer
) -> Any:
    from arthex.core.trajectories import Trajectory

    messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
    response = await client.chat.completions.create(
        model=policy,
        messages=messages,
        max_tokens=MAX_TOKENS,
        temperature=1.0,
        logprobs=True,
        seed=seed,
    )
    killer.reached("rollout")
    choice = response.choices[0]
    text = choice.message.content or ""
    # never equal within a group, so every step trains: one optimizer step per step
    reward = float(index) + sum(c.isdigit() for c in text) / (len(text) + 1)
    return Trajectory(messages_and_choices=[*messages, choice], reward=reward)


async def _loop(options: dict[str, Any], events: Connection, killer: Killer) -> None:
    from arthex.adapters.local import LocalBackend
    from arthex.adapters.local.checkpoints import checkpoints_dir
    from arthex.composition.api import TrainableModel
    from arthex.core.config import TrainConfig
    from arthex.core.gather import gather_trajectory_groups
    from arthex.core.trajectories import trajectory_group

    base_path = Path(options["base_path"])
    me = importlib.import_module("psutil").Process() if options.get("measure") else None
    model = TrainableModel(
        name=NAME,
        project=PROJECT,
        base_model=options["base_model"],
        base_path=str(base_path),
        report_metrics=[],
    )
    backend = LocalBackend(engine="torch", full_finetune=True, seed=0)
    try:
        await model.register(backend)
        step = await model.get_step()
        entries = sorted(p.name for p in checkpoints_dir(model_dir(base_path)).iterdir())
        dump = options.get("dump")
        if dump:
            from safetensors.torch import save_file

            weights, optimizer = backend.training_tensors(model.run)
            tensors = {f"w.{k}": v for k, v in weights.items()}
            tensors.update({f"o.{k}": v for k, v in optimizer.items()})
            save_file(tensors, str(Path(dump) / f"resume-{os.getpid()}.safetensors"))
        events.send({"event": "registered", "step": step, "pid": os.getpid(), "entries": entries})
        if options.get("serve_only"):
            served = model.openai_client()
            events.send(
                {
                    "event": "serving",
                    "base_url": str(served.base_url),
                    "api_key": served.api_key,
                    "model": model.get_inference_name(),
                }
            )
            await asyncio.Event().wait()  # until the parent kills this process
        client = model.openai_client()
        config = TrainConfig(learning_rate=LEARNING_RATE)
        while step < options["steps"]:
            started = time.monotonic()
            policy = model.get_inference_name()
            events.send({"event": "phase", "phase": "rollouts", "step": step})
            groups = await gather_trajectory_groups(
                (
                    trajectory_group(
                        _rollout(client, policy, prompt, r, step * 100 + p * 10 + r, killer)
                        for r in range(ROLLOUTS)
                    )
                    for p, prompt in enumerate(PROMPTS[:GROUPS])
                ),
                progress=False,
            )
            events.send({"event": "phase", "phase": "train", "step": step})
            result = await model.train(groups, config=config)
            step = result.step
            events.send({"event": "phase", "phase": "val", "step": step})
            val = [t.model_copy(update={"reward": t.reward / 2}) for g in groups for t in g]
            await model.log(val, split="val")
            events.send({"event": "phase", "phase": "delete", "step": step})
            decision = await model.delete_checkpoints(best_checkpoint_metric="val/reward")
            events.send(
                {
                    "event": "step",
                    "step": step,
                    "deleted": list(decision.deleted),
                    "best": decision.best_step,
                    "seconds": time.monotonic() - started,
                    "rss": me.memory_info().rss if me else None,
                    "fds": me.num_fds() if me else None,
                }
            )
        events.send({"event": "done", "step": step})
    finally:
        await backend.close()
        await model.close()
