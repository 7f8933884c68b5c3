"""Trainer memory: peak resident memory of one LoRA step of a Qwen2.5-0.5B-shaped model.

The model has Qwen2.5-0.5B's widths and vocabulary (hidden 896, MLP 4864, 14 query and 2
key/value heads, 151,936 words, tied embeddings) and random weights made on the spot, at two
depths (2 and 4 layers). Each measurement runs in its own child process: it loads the model
(float32, the CPU's training dtype) into a LoRA rank-8 trainer, reads every weight (they may
be mapped from the file, resident only once touched), resets the kernel's peak-RSS
counter (`/proc/self/clear_refs`), trains one optimizer step of one micro-batch, and reads the
peak back. Sizes are the peak minus the child's resident memory before the model was loaded
(the interpreter and libraries, which no trainer can avoid).

The two depths give a per-layer cost, extrapolated linearly to Qwen2.5-0.5B's 24 layers. The
checkpointed trainer is measured on an 8,192-token micro-batch itself (its child stays under
~2 GiB); the unchecked one at `--tokens` with the step's increase scaled linearly to 8,192
tokens (which overstates the fixed per-step buffers, one log-prob chunk among them: scaled
from 2,048 tokens, the checkpointed figure read 4.09 GiB; measured at 8k it reads 3.0). The
table shows the peak per 8k-token micro-batch against the floor: the weights, the LoRA
weights' gradients and AdamW moments, one stored hidden state per layer per token, one
layer's activations recomputed (its MLP for one chunk of tokens, as the trainer runs it),
and one float32 chunk of logits.

The old path (a bare torch loop: forward, full logits, log-softmax over the whole vocabulary,
the completion tokens' weighted log-probs, backward, AdamW) is measured once, at 2 layers and
half the tokens (it holds several `[tokens x vocabulary]` float32 tensors, ~1.2 GiB each per
2k tokens); its 22 further layers are taken to keep what unchecked layers keep.

Time per step (2 layers, half the tokens; `--time-only` runs just this): the trainer with and
without checkpointing against that bare loop, in wall and process CPU seconds, the loop's
run reused from the memory table.

`--tokens N` sets the micro-batch (default 2048: the machine this was written on is shared,
and no child passes ~6 GiB at that size).
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

from ._table import print_table

HIDDEN, INTERMEDIATE, HEADS, KV_HEADS, VOCAB, LAYERS = 896, 4864, 14, 2, 151936, 24
HEAD_DIM = HIDDEN // HEADS
DEPTHS = (2, 4)
MICRO = 8192
CHUNK_SIZES = (64, 256, 1024)
GiB = 2**30
MLP_CHUNK_TOKENS = 1024  # a checkpointed layer's MLP, this many tokens at a time (layers.py)


def _rss(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def make_model(directory: Path, layers: int, dtype: str | None = None) -> None:
    """A Qwen2.5-0.5B-shaped model of `layers` layers with random weights, saved in `dtype`
    (torch's default, float32, when None; the GPU smoke script saves bfloat16)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=layers,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        max_position_embeddings=32768,
        tie_word_embeddings=True,
        eos_token_id=0,
    )
    torch.manual_seed(0)
    before = torch.get_default_dtype()
    if dtype is not None:
        torch.set_default_dtype(getattr(torch, dtype))  # made and saved in that dtype
    try:
        Qwen2ForCausalLM(config).save_pretrained(str(directory))
    finally:
        torch.set_default_dtype(before)


def _groups(tokens: int) -> list[Any]:
    """One group of two rollouts (rewards 0 and 1) of `tokens / 2` tokens each, mostly
    completion, as agent rollouts are."""
    from arthex.core.trajectories import Trajectory, TrajectoryGroup
    from arthex.testing.builders import make_choice

    rng = random.Random(0)
    prompt = [rng.randrange(4, VOCAB) for _ in range(64)]
    out = []
    for reward in (0.0, 1.0):
        completion = [rng.randrange(4, VOCAB) for _ in range(tokens // 2 - 64)]
        choice = make_choice(
            "x",
            token_ids=completion,
            prompt_token_ids=prompt,
            logprobs=[-rng.uniform(0.5, 6.0) for _ in completion],
        )
        messages = [{"role": "user", "content": "q"}, choice]
        out.append(Trajectory(messages_and_choices=messages, reward=reward))
    return [TrajectoryGroup(out)]


def child(spec: dict[str, Any]) -> dict[str, float]:
    """One measurement (in this process): peak bytes above the libraries, and seconds."""
    import peft  # noqa: F401  (the libraries are part of the baseline, not of the step)
    import torch
    import transformers  # noqa: F401

    from arthex.adapters.local.packing import pack
    from arthex.adapters.local.trainer import PolicyTrainer, TrainerSettings
    from arthex.adapters.local.update import Update
    from arthex.core.config import TrainConfig

    torch.set_num_threads(spec["threads"])
    base = _rss("VmRSS")
    tokens, path = spec["tokens"], spec["path"]
    trainer = PolicyTrainer(
        TrainerSettings(
            base_model=spec["model"],
            full_finetune=False,
            micro_batch_tokens=tokens,
            gradient_checkpointing=path == "checkpointed",
        )
    )
    trainer.load(None)
    with torch.no_grad():  # the weights may be mapped from the file: make them resident now
        for param in trainer.model.parameters():
            param.sum()
    config = TrainConfig(learning_rate=1e-5)
    batch = pack(_groups(tokens), config, max_length=32768, pad_token_id=0)
    loaded = _rss("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")
    started, cpu = time.perf_counter(), time.process_time()
    if path == "bare":
        _bare_step(trainer, batch)
    else:
        for _ in trainer.train(Update(batch, config, None)):
            pass
    seconds = time.perf_counter() - started
    return {
        "cpu": time.process_time() - cpu,
        "static": loaded - base,
        "peak": _rss("VmHWM") - base,
        "seconds": seconds,
        "tokens": float((batch.segment_ids >= 0).sum()),
    }


def chunk_child(spec: dict[str, Any]) -> dict[str, float]:
    """The log-prob head alone (a frozen, tied-style projection, as under LoRA) at one chunk
    size: forward and backward over `tokens` positions; peak bytes above the weight."""
    import torch

    from arthex.adapters.local.logprobs import chunked_selected_logprobs

    torch.set_num_threads(spec["threads"])
    gen = torch.Generator().manual_seed(0)
    head = torch.nn.Linear(HIDDEN, VOCAB, bias=False)
    head.weight.requires_grad_(False)
    hidden = torch.randn(spec["tokens"], HIDDEN, generator=gen, requires_grad=True)
    targets = torch.randint(0, VOCAB, (spec["tokens"],), generator=gen)
    base = _rss("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")
    started = time.perf_counter()
    chosen, _ = chunked_selected_logprobs(head, hidden, targets, spec["chunk"])
    chosen.sum().backward()  # type: ignore[no-untyped-call]
    return {"seconds": time.perf_counter() - started, "peak": _rss("VmHWM") - base}


def _bare_step(trainer: Any, batch: Any) -> None:
    """The plain step on the trainer's own model and optimizer: full logits in float32."""
    import torch

    scale = (batch.advantages * batch.weights * batch.mask)[:, 1:]
    trainer.optimizer.zero_grad(set_to_none=True)
    logits = trainer.model(input_ids=batch.tokens, use_cache=False).logits
    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    new = logp.gather(-1, batch.tokens[:, 1:, None]).squeeze(-1)
    (-(new * scale).sum() / float(batch.mask[:, 1:].sum())).backward()
    trainer.optimizer.step()


def measure(spec: dict[str, Any]) -> dict[str, float]:
    # a fixed mmap threshold: glibc then returns every large freed block at once, so the
    # resident peak follows the live tensors instead of the allocator's free lists
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072"}
    found = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_memory", "--child", json.dumps(spec)],
        check=False,
        capture_output=True,
        text=True,
        env=env,
    )
    if found.returncode != 0:
        raise SystemExit(f"measuring {spec} failed:\n{found.stderr[-3000:]}")
    result: dict[str, float] = json.loads(found.stdout.strip().splitlines()[-1])
    return result


def floor_bytes(tokens: int, chunk: int) -> dict[str, int]:
    """What no trainer of this step can do without (see the module docstring)."""
    layer = 2 * HIDDEN * HEADS * HEAD_DIM + 2 * HIDDEN * KV_HEADS * HEAD_DIM
    layer += (HEADS + 2 * KV_HEADS) * HEAD_DIM + 3 * HIDDEN * INTERMEDIATE + 2 * HIDDEN
    params = VOCAB * HIDDEN + LAYERS * layer + HIDDEN
    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    sides = 4 * HIDDEN + 2 * kv + 2 * q + 3 * (HIDDEN + INTERMEDIATE)
    lora = LAYERS * 8 * sides
    attention = 4 * HIDDEN + 3 * (HEADS + KV_HEADS) * HEAD_DIM
    return {
        "weights": 4 * params,
        "LoRA gradients+AdamW": 16 * lora,
        "stored hidden states": 4 * tokens * HIDDEN * LAYERS,
        "one layer recomputed": 4 * (tokens * attention + MLP_CHUNK_TOKENS * 4 * INTERMEDIATE),
        "one log-prob chunk": 4 * chunk * VOCAB,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks memory")
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--child", default=None)
    parser.add_argument("--time-only", action="store_true", help="only the time per step")
    args = parser.parse_args(argv if argv is not None else [])
    if args.child is not None:
        spec = json.loads(args.child)
        print(json.dumps(chunk_child(spec) if "chunk" in spec else child(spec)))
        return
    from arthex.adapters.local.logprobs import DEFAULT_CHUNK_TOKENS

    tokens, threads = args.tokens, args.threads
    with tempfile.TemporaryDirectory(prefix="arthex-bench-memory-") as root:
        models = {}
        for depth in DEPTHS[:1] if args.time_only else DEPTHS:
            models[depth] = str(Path(root) / f"qwen-{depth}")
            make_model(Path(models[depth]), depth)
        if args.time_only:
            timing(models[DEPTHS[0]], tokens // 2, threads, None)
            return

        def run(depth: int, path: str, at: int = tokens) -> dict[str, float]:
            spec = {"model": models[depth], "path": path, "tokens": at, "threads": threads}
            return measure(spec)

        checked = {d: run(d, "checkpointed", MICRO) for d in DEPTHS}
        plain = {d: run(d, "plain") for d in DEPTHS}
        bare = run(DEPTHS[0], "bare", tokens // 2)
        _report(tokens, checked, plain, bare, DEFAULT_CHUNK_TOKENS)
        timing(models[DEPTHS[0]], tokens // 2, threads, bare)
    chunks = [
        [size, found["seconds"], found["peak"] / 2**20]
        for size in CHUNK_SIZES
        for found in [measure({"chunk": size, "tokens": tokens, "threads": threads})]
    ]
    print_table(
        f"The log-prob head alone, {tokens} positions, forward and backward, by chunk size",
        ["chunk", "seconds", "peak MiB"],
        chunks,
    )


def doctor_plan(checkpointed: bool) -> int:
    """`arthex doctor`'s trainer parts for this step at 24 layers on the CPU (float32), 8k
    tokens in one micro-batch (four rows of 2048)."""
    from arthex.apps.doctor.memory import ModelShape, PlanSettings, plan

    shape = ModelShape(
        vocab=VOCAB, hidden=HIDDEN, intermediate=INTERMEDIATE, layers=LAYERS, heads=HEADS,
        kv_heads=KV_HEADS, head_dim=HEAD_DIM, tied=True, context=32768, qkv_bias=True,
    )  # fmt: skip
    settings = PlanSettings(
        mode="lora", max_seq_len=2048, batch=4, gradient_checkpointing=checkpointed
    )
    found = plan(shape, settings, 0, 0)
    return sum(found.part(p) for p in ("weights", "LoRA+AdamW", "activations", "log-prob chunk"))


def _at_24(found: dict[int, dict[str, float]], tokens: int) -> tuple[float, float, float]:
    """(static bytes at 24 layers, the step's increase per 8k tokens at 24 layers, its share
    per layer per 8k tokens): linear in depth, and in tokens from the measured count."""
    (d1, a), (d2, b) = sorted(found.items())
    static = a["static"] + (b["static"] - a["static"]) / (d2 - d1) * (LAYERS - d1)
    step_a, step_b = a["peak"] - a["static"], b["peak"] - b["static"]
    per_layer = (step_b - step_a) / (d2 - d1) * MICRO / tokens
    return static, step_a * MICRO / tokens + per_layer * (LAYERS - d1), per_layer


def _report(
    tokens: int,
    checked: dict[int, dict[str, float]],
    plain: dict[int, dict[str, float]],
    bare: dict[str, float],
    chunk: int,
) -> None:
    floor = floor_bytes(MICRO, chunk)
    total_floor = sum(floor.values())
    rows: list[list[object]] = []
    slopes = {}
    paths = (("checkpointing on", checked, MICRO), ("checkpointing off", plain, tokens))
    for name, found, measured_at in paths:
        static, step, slopes[name] = _at_24(found, measured_at)
        measured = ", ".join(f"{d} layers {found[d]['peak'] / GiB:.2f}" for d in sorted(found))
        planned = doctor_plan(name == "checkpointing on")
        rows.append(
            [name, measured, slopes[name] / GiB, (static + step) / GiB, total_floor / GiB,
             (static + step) / total_floor, planned / GiB, planned / (static + step)]
        )  # fmt: skip
    # the old path at one depth: its layers keep what unchecked layers keep (the slope above)
    static, _, _ = _at_24(plain, tokens)
    old_step = (bare["peak"] - bare["static"]) * MICRO / (tokens // 2)
    old = static + old_step + slopes["checkpointing off"] * (LAYERS - DEPTHS[0])
    rows.append(
        [
            "old path (full logits, once)",
            f"{DEPTHS[0]} layers {bare['peak'] / GiB:.2f} at {tokens // 2} tokens",
            slopes["checkpointing off"] / GiB,
            old / GiB,
            total_floor / GiB,
            old / total_floor,
            "-",
            "-",
        ]
    )
    print_table(
        f"Peak memory of one LoRA step, Qwen2.5-0.5B shape, per {MICRO}-token micro-batch at "
        f"{LAYERS} layers (checkpointed measured at {MICRO} tokens, unchecked at {tokens}; GiB)",
        [
            "trainer",
            "measured peaks",
            "per layer, 8k",
            "peak at 24 layers, 8k",
            "floor",
            "ratio",
            "doctor's plan",
            "plan / peak",
        ],
        rows,
    )
    print_table("The floor (GiB)", ["part", "size"], [[k, v / GiB] for k, v in floor.items()])


def timing(model: str, tokens: int, threads: int, bare: dict[str, float] | None) -> None:
    """The trainer with and without checkpointing against the bare loop, all at the same
    tokens (half the memory run's: the bare loop holds the full logits, so it runs once,
    its measurement reused when the memory run made it). Wall and process CPU seconds (which
    other work on a shared machine inflates least)."""
    found = {"bare": bare} if bare is not None else {}
    for path in ("bare", "plain", "checkpointed"):
        if path not in found:
            spec = {"model": model, "path": path, "tokens": tokens, "threads": threads}
            found[path] = measure(spec)
    names = {"bare": "bare torch loop (full logits)", "plain": "trainer, checkpointing off",
             "checkpointed": "trainer, checkpointing on"}  # fmt: skip
    base = found["bare"]
    rows = [
        [names[p], r["seconds"], r["cpu"], base["seconds"] / r["seconds"], base["cpu"] / r["cpu"]]
        for p, r in found.items()
    ]
    print_table(
        f"Time per step, {DEPTHS[0]} layers, {tokens} tokens ({threads} torch threads)",
        ["path", "wall s", "CPU s", "vs bare (wall)", "vs bare (CPU)"],
        rows,
    )


if __name__ == "__main__":
    main(sys.argv[1:])
