"""Sharded training: step time on 1 and N ranks against one process, and the communication share.

One optimizer step over an RL-shaped batch (the trainer benchmark's workload), full fine-tuning:

- `one process`: PolicyTrainer in this process, with every core (or the GPU);
- `FSDP2, 1 rank`: the sharded trainer alone in its own process (what FSDP2's hooks cost
  when there is nothing to share);
- `FSDP2, N ranks`: N rank processes on gloo (CPU, each with cores/N threads) or NCCL (one
  GPU each), rows split as LocalBackend splits them.

The step time is rank 0's wall time for `train`, all ranks starting together after a barrier;
the best of the rounds is reported, and the median ratio against one process. The
communication share is measured on one further step with torch's profiler on rank 0: the time
during which an all-gather, reduce-scatter or all-reduce was in flight (gloo's own ops on CPU,
NCCL kernels on GPU), over that step's wall time. On CPU it includes the wait for the slower
rank, so it is an upper bound on what the wire costs.

Then the whole `LocalBackend.train` call with and without ranks (packing, the command to the
ranks, the step, gathering the checkpoint to rank 0, writing it, serving it).

    python -m benchmarks distributed            # CPU, 2 ranks
    python -m benchmarks.bench_distributed --device cuda --ranks 4
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from arthex.adapters.local import LocalBackend
from arthex.adapters.local.packing import PackedBatch, pack
from arthex.adapters.local.trainer import PolicyTrainer, TrainerSettings
from arthex.core.config import TrainConfig
from arthex.core.identity import ModelSpec, RunRef

from ._table import print_table
from .bench_trainer import TINY, Workload, make_groups
from .bench_trainer import vocab_size as vocab_of

RUN = RunRef("bench", "sharded")
# gloo's and NCCL's own spans of each collective (recorded where the work runs), and NCCL's
# GPU kernels
COMM_PREFIXES = ("gloo:", "nccl:", "nccldevkernel", "ncclkernel")


def config_for(work: Workload) -> TrainConfig:
    return TrainConfig(learning_rate=1e-5)  # one optimizer step over the whole batch


def build_batch(model_dir: str, work: Workload, trainer: PolicyTrainer) -> PackedBatch:
    groups = make_groups(work, vocab_of(model_dir))
    return pack(
        groups, config_for(work), max_length=trainer.max_length, pad_token_id=trainer.pad_token_id
    )


# --- one process -----------------------------------------------------------------------------


def single_process(model_dir: str, work: Workload, device: str, rounds: int) -> list[float]:
    torch.set_num_threads(os.cpu_count() or 1)
    trainer = PolicyTrainer(
        TrainerSettings(base_model=model_dir, device=device, full_finetune=True)
    )
    trainer.load(None)
    batch = build_batch(model_dir, work, trainer)
    times = []
    for _ in range(rounds + 1):
        started = time.perf_counter()
        for _ in trainer.train(batch, config_for(work), reference=None):
            pass
        _sync(device)
        times.append(time.perf_counter() - started)
    return times[1:]  # the first is warm-up


# --- ranks -----------------------------------------------------------------------------------


def _rank_main(
    rank: int, size: int, port: int, model_dir: str, device: str, rounds: int, out: str
) -> None:
    from arthex.adapters.local.distributed.sharded import ShardedTrainer

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if device == "cuda":
        device = f"cuda:{rank}"
        torch.cuda.set_device(device)
    else:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // size))
    dist.init_process_group(
        "nccl" if device.startswith("cuda") else "gloo", rank=rank, world_size=size
    )
    trainer = ShardedTrainer(
        TrainerSettings(base_model=model_dir, device=device, full_finetune=True), rank, size
    )
    trainer.load(None)
    work = TINY
    batch = build_batch(model_dir, work, trainer)
    config = config_for(work)

    def step() -> float:
        dist.barrier()
        started = time.perf_counter()
        for _ in trainer.train(batch, config, reference=None):
            pass
        _sync(device)
        return time.perf_counter() - started

    times = [step() for _ in range(rounds + 1)][1:]
    comm, profiled = _profiled_step(step, rank, device)
    if rank == 0:
        Path(out).write_text(json.dumps({"times": times, "comm": comm, "profiled": profiled}))
    dist.destroy_process_group()


def _profiled_step(step: Any, rank: int, device: str) -> tuple[float, float]:
    """(seconds a collective was in flight, the step's seconds) on rank 0."""
    from torch.profiler import ProfilerActivity, profile

    if rank != 0:
        step()
        return 0.0, 0.0
    activities = [ProfilerActivity.CPU]
    if device.startswith("cuda"):
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        seconds = step()
    spans: list[tuple[float, float]] = []
    for event in prof.events():
        if event.name.lower().startswith(COMM_PREFIXES):
            spans.append((event.time_range.start, event.time_range.end))
    return _union(spans) / 1e6, seconds


def _union(spans: list[tuple[float, float]]) -> float:
    """Total length covered by the spans (overlapping collectives count once)."""
    total, end = 0.0, float("-inf")
    for start, stop in sorted(spans):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


def ranks(model_dir: str, size: int, device: str, rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "rank0.json"
        context = multiprocessing.get_context("spawn")
        port = _free_port()
        procs = [
            context.Process(
                target=_rank_main, args=(rank, size, port, model_dir, device, rounds, str(out))
            )
            for rank in range(size)
        ]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join()
        if any(proc.exitcode != 0 for proc in procs):
            raise RuntimeError(f"a rank failed: exit codes {[p.exitcode for p in procs]}")
        result: dict[str, Any] = json.loads(out.read_text())
        return result


# --- the whole call ------------------------------------------------------------------------


def backend_calls(model_dir: str, world: int | None, device: str, rounds: int) -> list[float]:
    async def main() -> list[float]:
        with tempfile.TemporaryDirectory() as root:
            backend = LocalBackend(
                root, engine="torch", full_finetune=True, world_size=world, device=device
            )
            try:
                await backend.register(ModelSpec(run=RUN, base_model=model_dir, base_path=root))
                groups = make_groups(TINY, vocab_of(model_dir))
                times = []
                for _ in range(rounds + 1):
                    started = time.perf_counter()
                    async for _ in backend.train(RUN, groups, config_for(TINY)):
                        pass
                    times.append(time.perf_counter() - started)
                    step = await backend.get_step(RUN)
                    await backend.delete_checkpoint_files(RUN, [step])
                return times[1:]
            finally:
                await backend.close()

    return asyncio.run(main())


# --- report --------------------------------------------------------------------------------


def measure(model_dir: str, label: str, size: int, device: str, rounds: int) -> list[list[object]]:
    base = single_process(model_dir, TINY, "cuda:0" if device == "cuda" else "cpu", rounds)
    one = ranks(model_dir, 1, device, rounds)
    many = ranks(model_dir, size, device, rounds)
    rows: list[list[object]] = [[label, "one process", min(base) * 1e3, 1.0, 1.0, "-"]]
    for name, result in (("FSDP2, 1 rank", one), (f"FSDP2, {size} ranks", many)):
        times = result["times"]
        share = result["comm"] / result["profiled"] if result["profiled"] else 0.0
        paired = statistics.median(b / t for b, t in zip(base, times, strict=False))
        rows.append([label, name, min(times) * 1e3, min(base) / min(times), paired, f"{share:.0%}"])
    solo = backend_calls(model_dir, None, device, rounds)
    sharded = backend_calls(model_dir, size, device, rounds)
    rows.append([label, "LocalBackend.train, one process", min(solo) * 1e3, 1.0, 1.0, "-"])
    rows.append(
        [
            label,
            f"LocalBackend.train, {size} ranks",
            min(sharded) * 1e3,
            min(solo) / min(sharded),
            statistics.median(a / b for a, b in zip(solo, sharded, strict=True)),
            "-",
        ]
    )
    return rows


def main(argv: list[str] | None = None) -> None:
    from arthex.testing.tiny_model import tiny_model

    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_distributed")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--models", default="3M", help="comma-separated sizes: tiny, 3M, 20M")
    args = parser.parse_args(argv if argv is not None else [])
    rows: list[list[object]] = []
    with tempfile.TemporaryDirectory() as scratch:
        for size_name in args.models.split(","):
            model_dir = tiny_model(Path(scratch) / size_name, size=size_name)
            rows += measure(model_dir, size_name, args.ranks, args.device, args.rounds)
    print_table(
        f"Sharded training step ({args.device}, {os.cpu_count()} cores, workload {TINY.name})",
        [
            "model",
            "path",
            "best ms",
            "speed-up (best)",
            "speed-up (median of rounds)",
            "comm share",
        ],
        rows,
    )


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


if __name__ == "__main__":
    main(sys.argv[1:])
