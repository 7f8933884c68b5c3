"""The trainer's memory on one CUDA GPU: peak CUDA memory and tokens/s of LoRA steps of a
Qwen2.5-0.5B-shaped model on 2,048-token rows, with and without activation checkpointing,
beside what `arthex doctor`'s plan says for the same step.

Needs one CUDA GPU with 8 GB free and arthex installed with a CUDA build of torch. Then

    python benchmarks/gpu/memory_smoke.py                 # from the repository root
    python benchmarks/gpu/memory_smoke.py --layers 24     # the real depth (default 24)

No hub download: the model has Qwen2.5-0.5B's widths, vocabulary (151,936) and depth, and
random weights made on the spot (bfloat16 on the GPU, as the trainer loads a LoRA base). Each
setting runs in its own child process so one's cache does not flatter the other: one warm-up
step, then `--steps` timed ones; `torch.cuda.max_memory_allocated` is the peak. Prints a
table; the lines also go to `$OUT/memory_smoke.json` when `$OUT` is set.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# run as a script from the repository root: the CPU benchmark's model maker is one import away
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.bench_memory import make_model

ROW = 2048
ROWS = 4  # 8,192 tokens: one micro-batch


def groups(seed: int) -> list[Any]:
    from arthex.core.trajectories import Trajectory, TrajectoryGroup
    from arthex.testing.builders import make_choice

    rng = random.Random(seed)
    prompt = [rng.randrange(4, 151936) for _ in range(128)]
    out = []
    for i in range(ROWS):
        completion = [rng.randrange(4, 151936) for _ in range(ROW - 128)]
        choice = make_choice(
            "x",
            token_ids=completion,
            prompt_token_ids=prompt,
            logprobs=[-rng.uniform(0.5, 6.0) for _ in completion],
        )
        messages = [{"role": "user", "content": "q"}, choice]
        out.append(Trajectory(messages_and_choices=messages, reward=float(i % 2)))
    return [TrajectoryGroup(out)]


def child(model: str, checkpointing: bool, steps: int) -> dict[str, Any]:
    import torch

    from arthex.adapters.local.packing import pack
    from arthex.adapters.local.trainer import PolicyTrainer, TrainerSettings
    from arthex.adapters.local.update import Update
    from arthex.core.config import TrainConfig

    trainer = PolicyTrainer(
        TrainerSettings(
            base_model=model,
            device="cuda",
            full_finetune=False,
            gradient_checkpointing=checkpointing,
        )
    )
    trainer.load(None)
    config = TrainConfig(learning_rate=1e-5)
    batches = [pack(groups(s), config, max_length=32768, pad_token_id=0) for s in range(steps + 1)]
    for _ in trainer.train(Update(batches[0], config, None)):
        pass
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    for batch in batches[1:]:
        for _ in trainer.train(Update(batch, config, None)):
            pass
    torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    tokens = sum(int((b.segment_ids >= 0).sum()) for b in batches[1:])
    return {
        "checkpointing": checkpointing,
        "peak_gib": torch.cuda.max_memory_allocated() / 2**30,
        "tokens_per_s": tokens / seconds,
        "seconds_per_step": seconds / steps,
    }


def planned(layers: int, checkpointing: bool) -> float:
    """The doctor's trainer parts (weights, LoRA state, activations, one log-prob chunk)."""
    from arthex.apps.doctor.memory import ModelShape, PlanSettings, plan

    shape = ModelShape(
        vocab=151936, hidden=896, intermediate=4864, layers=layers, heads=14, kv_heads=2,
        head_dim=64, tied=True, context=32768, qkv_bias=True,
    )  # fmt: skip
    settings = PlanSettings(
        max_seq_len=ROW, batch=ROWS, gpu=True, gradient_checkpointing=checkpointing
    )
    found = plan(shape, settings, 0, 0)
    parts = ("weights", "LoRA+AdamW", "activations", "log-prob chunk")
    return sum(found.part(name) for name in parts) / 2**30


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--child", default=None)
    args = parser.parse_args()
    if args.child is not None:
        spec = json.loads(args.child)
        print(json.dumps(child(spec["model"], spec["checkpointing"], args.steps)))
        return
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="arthex-memory-smoke-") as root:
        model = str(Path(root) / "qwen")
        make_model(Path(model), args.layers, dtype="bfloat16")
        for checkpointing in (True, False):
            spec = json.dumps({"model": model, "checkpointing": checkpointing})
            found = subprocess.run(
                [sys.executable, __file__, "--child", spec, "--steps", str(args.steps)],
                capture_output=True,
                text=True,
                check=False,
            )
            if found.returncode != 0:
                rows.append({"checkpointing": checkpointing, "error": found.stderr[-2000:]})
                continue
            result = json.loads(found.stdout.strip().splitlines()[-1])
            result["planned_gib"] = planned(args.layers, checkpointing)
            rows.append(result)
    print(f"Qwen2.5-0.5B shape, {args.layers} layers, LoRA r8, {ROWS} rows of {ROW} tokens")
    print("| checkpointing | peak CUDA GiB | planned GiB | tokens/s | s/step |")
    print("|---|---|---|---|---|")
    for row in rows:
        if "error" in row:
            last = (str(row["error"]).strip().splitlines() or ["no output (killed?)"])[-1]
            print(f"| {row['checkpointing']} | failed: {last} |")
            continue
        print(
            f"| {row['checkpointing']} | {row['peak_gib']:.2f} | {row['planned_gib']:.2f} | "
            f"{row['tokens_per_s']:,.0f} | {row['seconds_per_step']:.2f} |"
        )
    out = os.environ.get("OUT")
    if out:
        Path(out, "memory_smoke.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
