"""Sharded training: step time on 1 and N ranks, and the communication share of a step.

One optimizer step over an RL-shaped batch (the trainer benchmark's workload: 32 rollouts of
32-200 tokens after a 48-token prompt), full fine-tuning, on:

- `one process`: PolicyTrainer in this process;
- `FSDP2, 1 rank`: the sharded trainer alone in its own process (FSDP2's hooks with nothing
  to share);
- `FSDP2, N ranks`: N rank processes on gloo (CPU) or NCCL (one GPU each), rows split as
  LocalBackend splits them.

Every process gets `--threads` torch threads (default 1), so on CPU N ranks use N times the
cores of one process: the ratio says how well the work divides, not that sharding makes one
core faster. The paths stay alive side by side and take turns, round by round (an idle group
waits on a pipe), so a shared machine's load hits every path alike; the step time is rank 0's
wall time for `train`, all ranks released together; the table shows the best round and the
median of per-round ratios against one process.

The communication share is measured on one further step with torch's profiler on rank 0: the
time during which a collective was in flight (gloo's own spans of all-gather, reduce-scatter
and all-reduce on CPU; NCCL's kernels on GPU), over that step's wall time. On CPU it includes
waiting for the slower rank, so it bounds what the wire costs from above.

Then the whole `LocalBackend.train` call with and without ranks, taking turns the same way
(packing, the command to the ranks, the step, gathering the checkpoint to rank 0, writing it,
loading it into the inference engine).

    python -m benchmarks distributed                 # CPU, 2 ranks, 1 thread each
    python -m benchmarks.bench_distributed --device cuda --ranks 4 --models 3M,20M
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
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from arthex.adapters.local import LocalBackend
from arthex.adapters.local.packing import PackedBatch, pack
from arthex.adapters.local.trainer import PolicyTrainer, TrainerSettings
from arthex.adapters.local.update import Update
from arthex.core.config import TrainConfig
from arthex.core.identity import ModelSpec, RunRef

from ._table import print_table
from .bench_trainer import TINY, make_groups, vocab_size

RUN = RunRef("bench", "sharded")
CONFIG = TrainConfig(learning_rate=1e-5)  # one optimizer step over the whole batch
# gloo's and NCCL's own spans of each collective (recorded where the work runs), NCCL's kernels
COMM_PREFIXES = ("gloo:", "nccl:", "nccldevkernel", "ncclkernel")


def build_batch(model_dir: str, trainer: PolicyTrainer) -> PackedBatch:
    groups = make_groups(TINY, vocab_size(model_dir))
    return pack(groups, CONFIG, max_length=trainer.max_length, pad_token_id=trainer.pad_token_id)


def timed_step(trainer: PolicyTrainer, batch: PackedBatch, device: str) -> float:
    started = time.perf_counter()
    for _ in trainer.train(Update(batch, CONFIG, None)):
        pass
    _sync(device)
    return time.perf_counter() - started


# --- a group of ranks, driven over pipes ---------------------------------------------------


def _rank_main(
    rank: int, size: int, port: int, model_dir: str, device: str, threads: int, pipe: Connection
) -> None:
    from arthex.adapters.local.distributed.sharded import ShardedTrainer

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(threads)
    if device == "cuda":
        device = f"cuda:{rank}"
        torch.cuda.set_device(device)
    dist.init_process_group(
        "nccl" if device.startswith("cuda") else "gloo", rank=rank, world_size=size
    )
    settings = TrainerSettings(base_model=model_dir, device=device, full_finetune=True)
    trainer = ShardedTrainer(settings, rank, size)
    trainer.load(None)
    batch = build_batch(model_dir, trainer)
    timed_step(trainer, batch, device)  # warm-up
    pipe.send("ready")
    while True:
        command = pipe.recv()
        if command == "stop":
            break
        dist.barrier()
        if command == "step":
            pipe.send(timed_step(trainer, batch, device))
        else:
            pipe.send(_profiled_step(trainer, batch, device, rank))
    dist.destroy_process_group()


def _profiled_step(
    trainer: PolicyTrainer, batch: PackedBatch, device: str, rank: int
) -> tuple[float, float]:
    """(seconds a collective was in flight, the step's seconds), measured on rank 0."""
    from torch.profiler import ProfilerActivity, profile

    if rank != 0:
        return 0.0, timed_step(trainer, batch, device)
    activities = [ProfilerActivity.CPU]
    if device.startswith("cuda"):
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        seconds = timed_step(trainer, batch, device)
    spans = [
        (event.time_range.start, event.time_range.end)
        for event in prof.events()
        if event.name.lower().startswith(COMM_PREFIXES)
    ]
    return _union(spans) / 1e6, seconds


def _union(spans: list[tuple[float, float]]) -> float:
    """Total length the spans cover (overlapping collectives count once)."""
    total, end = 0.0, float("-inf")
    for start, stop in sorted(spans):
        if stop > end:
            total += stop - max(start, end)
            end = stop
    return total


class RankGroup:
    """`size` rank processes that step when told to."""

    def __init__(self, size: int, model_dir: str, device: str, threads: int) -> None:
        context = multiprocessing.get_context("spawn")
        port = _free_port()
        self.pipes: list[Connection] = []
        self.procs = []
        for rank in range(size):
            mine, theirs = context.Pipe()
            proc = context.Process(
                target=_rank_main, args=(rank, size, port, model_dir, device, threads, theirs)
            )
            proc.start()
            self.pipes.append(mine)
            self.procs.append(proc)
        for pipe in self.pipes:
            if pipe.recv() != "ready":
                raise RuntimeError("a rank did not start")

    def ask(self, command: str) -> Any:
        for pipe in self.pipes:
            pipe.send(command)
        answers = [pipe.recv() for pipe in self.pipes]
        return answers[0]

    def close(self) -> None:
        for pipe in self.pipes:
            pipe.send("stop")
        for proc in self.procs:
            proc.join()


# --- the step ------------------------------------------------------------------------------


def steps(model_dir: str, size: int, device: str, threads: int, rounds: int) -> dict[str, Any]:
    torch.set_num_threads(threads)
    here = "cuda:0" if device == "cuda" else "cpu"
    trainer = PolicyTrainer(TrainerSettings(base_model=model_dir, device=here, full_finetune=True))
    trainer.load(None)
    batch = build_batch(model_dir, trainer)
    timed_step(trainer, batch, here)
    groups = {
        1: RankGroup(1, model_dir, device, threads),
        size: RankGroup(size, model_dir, device, threads),
    }
    times: dict[str, list[float]] = {"one process": [], **{_ranks(n): [] for n in groups}}
    try:
        for r in range(rounds):
            order = [("one process", None), *((_ranks(n), g) for n, g in groups.items())]
            for name, group in order if r % 2 == 0 else order[::-1]:
                times[name].append(
                    timed_step(trainer, batch, here) if group is None else group.ask("step")
                )
        shares = {_ranks(n): group.ask("profile") for n, group in groups.items()}
    finally:
        for group in groups.values():
            group.close()
    return {"times": times, "shares": shares}


# --- the whole call ------------------------------------------------------------------------


def backend_calls(model_dir: str, size: int, device: str, rounds: int) -> dict[str, list[float]]:
    async def main(root: str) -> dict[str, list[float]]:
        made = {
            "one process": LocalBackend(root + "/solo", engine="torch", full_finetune=True),
            _ranks(size): LocalBackend(
                root + "/ranks", engine="torch", full_finetune=True, world_size=size, device=device
            ),
        }
        groups = make_groups(TINY, vocab_size(model_dir))
        times: dict[str, list[float]] = {name: [] for name in made}
        try:
            for backend in made.values():
                await backend.register(ModelSpec(run=RUN, base_model=model_dir, base_path=root))
            for r in range(rounds + 1):
                order = list(made.items())
                for name, backend in order if r % 2 == 0 else order[::-1]:
                    started = time.perf_counter()
                    async for _ in backend.train_steps(RUN, groups, CONFIG):
                        pass
                    if r:  # the first round is warm-up
                        times[name].append(time.perf_counter() - started)
                    await backend.delete_checkpoint_files(RUN, [await backend.get_step(RUN)])
            return times
        finally:
            for backend in made.values():
                await backend.close()

    with tempfile.TemporaryDirectory() as root:
        return asyncio.run(main(root))


# --- report --------------------------------------------------------------------------------


def measure(
    model_dir: str, label: str, size: int, device: str, threads: int, rounds: int
) -> list[list[object]]:
    measured = steps(model_dir, size, device, threads, rounds)
    times, shares = measured["times"], measured["shares"]
    base = times["one process"]
    rows: list[list[object]] = []
    for name, seconds in times.items():
        share = "-"
        if name in shares:
            comm, total = shares[name]
            share = f"{comm / total:.0%}"
        label_name = name if name == "one process" else f"FSDP2, {name}"
        rows.append([label, label_name, *_ratios(base, seconds), share])
    calls = backend_calls(model_dir, size, device, rounds)
    for name, seconds in calls.items():
        rows.append(
            [label, f"LocalBackend.train, {name}", *_ratios(calls["one process"], seconds), "-"]
        )
    return rows


def _ratios(base: list[float], seconds: list[float]) -> list[object]:
    paired = statistics.median(b / s for b, s in zip(base, seconds, strict=True))
    return [min(seconds) * 1e3, statistics.median(seconds) * 1e3, paired]


def main(argv: list[str] | None = None) -> None:
    from arthex.testing.tiny_model import tiny_model

    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_distributed")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--models", default="3M", help="comma-separated sizes: tiny, 3M, 20M")
    args = parser.parse_args(argv if argv is not None else [])
    os.environ["ARTHEX_THREADS"] = str(args.threads)  # LocalBackend's ranks, like the others
    rows: list[list[object]] = []
    with tempfile.TemporaryDirectory() as scratch:
        for size_name in args.models.split(","):
            model_dir = tiny_model(Path(scratch) / size_name, size=size_name)
            rows += measure(
                model_dir, size_name, args.ranks, args.device, args.threads, args.rounds
            )
    print_table(
        f"Sharded training, one optimizer step ({args.device}, {os.cpu_count()} cores, "
        f"{args.threads} torch threads per process, {args.rounds} rounds taking turns)",
        ["model", "path", "best ms", "median ms", "speed-up (median of rounds)", "comm share"],
        rows,
    )
    print(json.dumps({"load_average": os.getloadavg()}))


def _ranks(n: int) -> str:
    return f"{n} rank" + ("s" if n > 1 else "")


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


if __name__ == "__main__":
    main(sys.argv[1:])
