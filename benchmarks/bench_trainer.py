"""Trainer overhead: tokens/s of LocalBackend training against a bare torch training loop.

The floor is the least any trainer must do for this batch: the same model (loaded from the
same directory, float32, eval mode), the same packed tensors, the same micro-batches and the
same number of AdamW steps, with the smallest correct loss: the advantage- and
weight-scaled logprob of each completion token (a weighted cross-entropy), nothing else.
Against it, in the same run and interleaved round by round so machine noise hits every path
alike:

- `PolicyTrainer.train`: the trainer's step function over the already packed batch (loss
  with importance ratios and clipping, metrics, gradient clipping, AdamW);
- `LocalBackend.train`: the whole call: validation, packing, the steps, the checkpoint
  (weights and optimizer state, fsynced and renamed) and loading the new step into the
  inference engine.

Tokens are the batch's real (non-padding) tokens. Two models: the tiny test model, so small
that fixed per-call costs dominate, and a larger random Llama (hidden 256, 4 layers, the tiny
model's tokenizer) where the ratio says more about real overhead. Both are fully fine-tuned,
as `full_finetune=None` does below 50M parameters.

Ratios (path tokens/s over floor tokens/s; target >= 0.8): "best/best" compares the fastest
of each path's rounds; "median of rounds" pairs each round's call with the floor call next to
it, which cancels slow drifts in machine load; "CPU time" compares process CPU seconds, which
a shared machine inflates least but which leaves out waiting on fsync.

`--threads N` sets torch's intra-op threads for every path (default 1: with several threads,
other processes on a shared machine stall the thread barriers and the ratio turns to noise;
the overhead is per call, so more threads shrink the floor and lower the ratio somewhat);
`--device cuda` runs every path on a GPU; `--models tiny` skips the larger model.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import torch

from arthex.adapters.local import LocalBackend
from arthex.adapters.local import checkpoints as ckpt
from arthex.adapters.local.packing import PackedBatch, pack
from arthex.adapters.local.trainer import PolicyTrainer, TrainerSettings
from arthex.adapters.local.update import Update
from arthex.core.config import TrainConfig
from arthex.core.identity import ModelSpec, RunRef
from arthex.core.trajectories import Trajectory, TrajectoryGroup
from arthex.testing.builders import make_choice
from arthex.testing.tiny_model import tiny_model

from ._table import print_table

RUN = RunRef("bench", "trainer")
ROUNDS = 7


@attrs.frozen
class Workload:
    """A batch shaped like RL rollouts: groups of sampled completions of varied length."""

    name: str
    groups: int
    group_size: int
    prompt_tokens: int
    completion_tokens: tuple[int, int]  # min, max
    optimizer_steps: int


TINY = Workload("tiny", 4, 8, 48, (32, 200), 2)
LARGER = Workload("larger", 2, 8, 48, (32, 200), 2)


def make_groups(work: Workload, vocab: int, seed: int = 0) -> list[TrajectoryGroup]:
    rng = random.Random(seed)
    low = 4  # past the special tokens
    out = []
    for _ in range(work.groups):
        prompt = [rng.randrange(low, vocab) for _ in range(work.prompt_tokens)]
        trajectories = []
        for i in range(work.group_size):
            length = rng.randint(*work.completion_tokens)
            tokens = [rng.randrange(low, vocab) for _ in range(length)]
            choice = make_choice(
                "x",
                token_ids=tokens,
                prompt_token_ids=prompt,
                logprobs=[-rng.uniform(0.5, 6.0) for _ in tokens],
            )
            trajectories.append(
                Trajectory(
                    messages_and_choices=[{"role": "user", "content": "q"}, choice],
                    reward=float(i % 3),
                )
            )
        out.append(TrajectoryGroup(trajectories))
    return out


def larger_model(directory: Path) -> str:
    """A random Llama with real width (about 3M parameters), the tiny model's tokenizer."""
    return tiny_model(directory, size="3M")


# --- the floor ---------------------------------------------------------------------------


class BareLoop:
    """forward, weighted next-token logprob, backward, AdamW: nothing a trainer could skip."""

    def __init__(self, model_dir: str, device: torch.device, lr: float) -> None:
        from transformers import AutoModelForCausalLM

        model: Any = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        self.model = model.to(device).eval()
        self.device = device
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=lr, betas=(0.9, 0.99), weight_decay=0.1
        )

    def run(self, batch: PackedBatch, steps: Sequence[Sequence[list[int]]]) -> None:
        scale = (batch.advantages * batch.weights * batch.mask)[:, 1:].to(self.device)
        tokens = batch.tokens.to(self.device)
        for micro_batches in steps:
            rows = [r for micro in micro_batches for r in micro]
            normalizer = float(batch.mask[rows, 1:].sum())
            self.optimizer.zero_grad(set_to_none=True)
            for micro in micro_batches:
                ids = tokens[micro]
                logits = self.model(input_ids=ids, use_cache=False).logits
                logp = torch.log_softmax(logits[:, :-1], dim=-1)
                new = logp.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
                loss = -(new * scale[micro]).sum() / normalizer
                loss.backward()  # type: ignore[no-untyped-call]
            self.optimizer.step()
        if self.device.type == "cuda":
            torch.cuda.synchronize()


def step_plan(
    trainer: PolicyTrainer, batch: PackedBatch, config: TrainConfig
) -> list[list[list[int]]]:
    """The trainer's own optimizer steps and micro-batches, as row indices."""
    per_step = config.grad_accumulation_sequences or batch.num_rows
    size = max(1, trainer.settings.micro_batch_tokens // max(batch.seq_len, 1))
    plan = []
    for start in range(0, batch.num_rows, per_step):
        rows = list(range(start, min(start + per_step, batch.num_rows)))
        plan.append([rows[i : i + size] for i in range(0, len(rows), size)])
    return plan


# --- one model -------------------------------------------------------------------------


def measure(
    model_dir: str, work: Workload, device: str, rounds: int, root: Path
) -> list[list[object]]:
    tokenizer_vocab = vocab_size(model_dir)
    groups = make_groups(work, tokenizer_vocab)
    rows = work.groups * work.group_size
    config = TrainConfig(
        learning_rate=1e-5, grad_accumulation_sequences=-(-rows // work.optimizer_steps)
    )
    dev = torch.device(device)

    trainer = PolicyTrainer(TrainerSettings(base_model=model_dir, device=device))
    trainer.load(None)
    batch = pack(groups, config, max_length=trainer.max_length, pad_token_id=trainer.pad_token_id)
    tokens = int((batch.segment_ids >= 0).sum())
    plan = step_plan(trainer, batch, config)
    bare = BareLoop(model_dir, dev, config.learning_rate)

    def run_bare() -> None:
        bare.run(batch, plan)

    def run_step() -> None:
        for _ in trainer.train(Update(batch, config, None)):
            pass
        _sync(dev)

    def run_pack_step() -> None:
        packed = pack(
            groups, config, max_length=trainer.max_length, pad_token_id=trainer.pad_token_id
        )
        for _ in trainer.train(Update(packed, config, None)):
            pass
        _sync(dev)

    checkpoint_root = root / "ckpt"

    def run_checkpoint() -> None:
        shutil.rmtree(checkpoint_root, ignore_errors=True)
        ckpt.publish(checkpoint_root, 1, trainer.write_checkpoint, trainer.trainer_state())

    backend = LocalBackend(str(root / "runs"), engine="torch", device=device)
    spec = ModelSpec(run=RUN, base_model=model_dir, base_path=str(root / "runs"))
    loop = asyncio.new_event_loop()
    loop.run_until_complete(backend.register(spec))

    async def backend_train() -> None:
        async for _ in backend.train_steps(RUN, groups, config):
            pass

    async def prune() -> None:
        latest = await backend.get_step(RUN)
        await backend.delete_checkpoint_files(RUN, [latest])

    def run_backend() -> None:
        loop.run_until_complete(backend_train())

    paths: list[tuple[str, Callable[[], None]]] = [
        ("bare torch loop (floor)", run_bare),
        ("PolicyTrainer.train (step function)", run_step),
        ("pack + PolicyTrainer.train", run_pack_step),
        ("LocalBackend.train (whole call)", run_backend),
    ]
    wall: dict[str, list[float]] = {name: [] for name, _ in paths}
    cpu: dict[str, list[float]] = {name: [] for name, _ in paths}
    checkpoint: list[float] = []
    try:
        for _, run in paths:  # warm-up: first-call allocations and lazy imports
            run()
        loop.run_until_complete(prune())
        for r in range(rounds):
            order = paths if r % 2 == 0 else paths[::-1]
            for name, run in order:
                started, cpu_started = time.perf_counter(), time.process_time()
                run()
                wall[name].append(time.perf_counter() - started)
                cpu[name].append(time.process_time() - cpu_started)
                loop.run_until_complete(prune())
            started = time.perf_counter()
            run_checkpoint()
            checkpoint.append(time.perf_counter() - started)
    finally:
        loop.run_until_complete(backend.close())
        loop.close()

    floor = paths[0][0]
    label = f"{work.name} ({_params(bare.model) / 1e6:.2f}M params)"
    table: list[list[object]] = []
    for name, _ in paths:
        seconds = min(wall[name])
        paired = statistics.median(f / t for f, t in zip(wall[floor], wall[name], strict=True))
        table.append(
            [
                label,
                name,
                seconds * 1e3,
                tokens / seconds,
                min(wall[floor]) / seconds,
                paired,
                min(cpu[floor]) / min(cpu[name]),
            ]
        )
    table.append([label, "checkpoint save alone", min(checkpoint) * 1e3, "", "", "", ""])
    shape = f"{batch.num_rows} rows x {batch.seq_len}, {tokens} tokens, {len(plan)} AdamW steps"
    table.append([label, f"batch: {shape}", "", "", "", "", ""])
    return table


def vocab_size(model_dir: str) -> int:
    from transformers import AutoConfig

    return int(AutoConfig.from_pretrained(model_dir).vocab_size)


def _params(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def run(threads: int, device: str, rounds: int, models: Sequence[str]) -> list[list[object]]:
    from transformers.utils import logging

    hf_logging: Any = logging
    hf_logging.disable_progress_bar()  # weights load once per path: no bars in the table
    torch.set_num_threads(threads)
    table: list[list[object]] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        tiny = tiny_model(root / "tiny")
        if "tiny" in models:
            table += measure(tiny, TINY, device, rounds, root / "tiny-run")
        if "larger" in models:
            larger = larger_model(root / "larger")
            table += measure(larger, LARGER, device, rounds, root / "larger-run")
    return table


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_trainer")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default=os.environ.get("ARTHEX_BENCH_DEVICE", "cpu"))
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--models", default="tiny,larger")
    args = parser.parse_args(argv if argv is not None else [])
    table = run(args.threads, args.device, args.rounds, args.models.split(","))
    print_table(
        f"Trainer overhead: tokens/s against a bare torch loop "
        f"({args.device}, {args.threads} torch threads, best of {args.rounds} interleaved)",
        [
            "model",
            "path",
            "ms per call (best)",
            "tokens/s (best)",
            "ratio: best/best",
            "ratio: median of rounds",
            "ratio: CPU time",
        ],
        table,
    )


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
