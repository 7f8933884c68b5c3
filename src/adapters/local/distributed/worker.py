"""One trainer rank: `python -m arthex.adapters.local.distributed.worker`.

The frontend starts its own machine's ranks this way, and any launcher can start the ranks of
other machines the same way, with torch's standard variables: MASTER_ADDR and MASTER_PORT
(the frontend's store), WORLD_SIZE, RANK and LOCAL_RANK (ARTHEX_-prefixed copies win, and
ARTHEX_RANK_OFFSET shifts RANK; see world.py). A rank joins the newest generation the frontend
announced, builds its ShardedTrainer, and executes the frontend's commands in order until it
is told to stop.

A rank never outlives its frontend: a heartbeat thread bumps `hb/{rank}` every second and ends
the process when the frontend's store stops answering, when the frontend sets `abort`, or,
for a rank the frontend started itself, when the frontend process is gone. Any exception is
written to `err/{rank}` (flagged "peer" when it came out of a collective or the store, which
is what a healthy rank sees when another one dies) before the process exits with status 1.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import socket
import sys
import threading
import time
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any

from .world import RankPlace, rank_place

HEARTBEAT_S = 1.0
STORE_LOST_S = 10.0
COLLECTIVE_TIMEOUT = timedelta(minutes=30)
EXIT_ERROR = 1
EXIT_ORPHANED = 3
EXIT_ABORTED = 4  # the frontend ended the generation: non-zero, so a restarting launcher
# (torchrun --max-restarts, a shell loop) starts the rank again for the next generation
JOIN_TIMEOUT = timedelta(minutes=15)  # a rank started by hand may come before the frontend


def main() -> None:
    place = rank_place(os.environ)
    _dump_stacks_on_signal(place.rank)
    generation = os.environ.get("ARTHEX_GENERATION")
    parent = os.environ.get("ARTHEX_PARENT_PID")
    threads = os.environ.get("ARTHEX_THREADS")
    serve_rank(
        place,
        generation=int(generation) if generation else None,
        parent_pid=int(parent) if parent else None,
        threads=int(threads) if threads else None,
    )


def _dump_stacks_on_signal(rank: int) -> None:
    """On SIGUSR1, write every thread's stack to ARTHEX_STACKS_FILE (the frontend's hang
    watchdog asks for them; the process goes on). The ready line tells the frontend the
    handler is in place: before it, SIGUSR1 would end the process."""
    path = os.environ.get("ARTHEX_STACKS_FILE")
    if not path or not hasattr(signal, "SIGUSR1"):
        return
    out = open(path, "a", encoding="utf-8")  # noqa: SIM115 - open for the process's life
    faulthandler.register(signal.SIGUSR1, file=out, all_threads=True)
    out.write(f"rank {rank}, pid {os.getpid()}: ready to dump stacks on SIGUSR1\n")
    out.flush()
    _STACKS_FILES.append(out)


_STACKS_FILES: list[Any] = []  # kept referenced: faulthandler writes to the descriptor


def serve_rank(
    place: RankPlace, *, generation: int | None, parent_pid: int | None, threads: int | None
) -> None:
    import torch

    from .channel import Channel, connect

    if threads:
        torch.set_num_threads(threads)
    if generation is None:
        root = connect(place.master_addr, place.master_port, timeout=JOIN_TIMEOUT)
        generation = _newest_generation(root)
    else:
        root = connect(place.master_addr, place.master_port)
    channel = Channel(root, generation)
    if channel.count(f"joined/{place.rank}", 1) != 1:
        # Not reported under err/{rank}: that slot belongs to the rank already running.
        sys.stderr.write(
            f"rank {place.rank} of generation {generation} is already running; each rank "
            "number must be started once\n"
        )
        os._exit(EXIT_ERROR)
    _Heartbeat(place, generation, parent_pid).start()
    try:
        _serve(channel, place)
    except BaseException as exc:
        _fail(channel, place, exc, peer=_from_peer(exc))
    os._exit(0)


def _newest_generation(root: Any) -> int:
    """The generation the frontend announced last and has not ended (a rank started by hand,
    or restarted by its launcher, joins it); exits when the frontend has closed."""
    while True:
        try:
            if root.check(["closed"]):
                os._exit(0)
            if root.check(["generation"]):
                generation = int(root.get("generation"))
                if not root.check([f"g{generation}/abort"]):
                    return generation
        except Exception:  # the frontend's store is gone: there is nothing left to join
            os._exit(0)
        time.sleep(0.2)


def _serve(channel: Any, place: RankPlace) -> None:
    import torch
    import torch.distributed as dist
    from torch._C._distributed_c10d import PrefixStore

    from ..trainer import TrainerSettings
    from .sharded import ShardedTrainer

    def idle() -> None:
        if channel.has("abort"):
            os._exit(EXIT_ABORTED)

    config = channel.wait_json("config", idle)
    device = place.device or _default_device(config["backend"], place.local_rank)
    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))
    sent = config["settings"]  # JSON turned the tuples into lists
    settings = TrainerSettings(
        **{
            **sent,
            "device": device,
            "lora_target_modules": tuple(sent["lora_target_modules"]),
            "adam_betas": tuple(sent["adam_betas"]),
        }
    )
    dist.init_process_group(
        config["backend"],
        store=PrefixStore("pg/", channel.store),
        rank=place.rank,
        world_size=place.world_size,
        timeout=COLLECTIVE_TIMEOUT,
    )
    trainer = ShardedTrainer(settings, place.rank, place.world_size)
    n = 0
    while True:
        command = channel.wait_json(f"cmd/{n}", idle)
        if not _execute(trainer, _Replies(channel, n, place.rank == 0), command):
            return
        n += 1


class _Replies:
    """Rank 0's replies to command n, numbered; the other ranks reply nothing."""

    def __init__(self, channel: Any, n: int, lead: bool) -> None:
        self.channel = channel
        self.n = n
        self.lead = lead
        self.sent = 0

    def __call__(self, kind: str, data: Any) -> None:
        if self.lead:
            self.channel.put_json(f"out/{self.n}/{self.sent}", {"kind": kind, "data": data})
        self.sent += 1

    def blob(self) -> bytes:
        data: bytes = self.channel.get_blob(f"cmd/{self.n}/blob")
        return data


def _execute(trainer: Any, reply: _Replies, command: dict[str, Any]) -> bool:
    """Run one command; False when it was the last one (stop)."""
    import torch.distributed as dist

    from ....core.config import TrainConfig
    from ..trainer_protocol import Update
    from .channel import decode_batch

    op, args = command["op"], command.get("args", {})
    if op == "load":
        trainer.load(Path(args["checkpoint"]) if args.get("checkpoint") else None)
        reply(
            "done",
            {
                "full_finetune": trainer.full_finetune,
                "max_length": trainer.max_length,
                "pad_token_id": trainer.pad_token_id,
                "state": trainer.trainer_state(),
            },
        )
    elif op == "train":
        batch = decode_batch(reply.blob())
        config = TrainConfig(**args["config"])
        reference = Path(args["reference"]) if args.get("reference") else None
        for metrics in trainer.train(Update(batch, config, reference)):
            reply("step", metrics)
        reply("done", None)
    elif op == "save":
        trainer.write_checkpoint(Path(args["directory"]))
        reply("done", None)
    elif op == "tensors":
        _write_tensors(trainer, Path(args["directory"]))
        reply("done", None)
    elif op == "stop":
        dist.barrier()  # every rank has read the command before the frontend forgets it
        reply("done", None)
        dist.destroy_process_group()
        return False
    else:
        raise ValueError(f"unknown command {op!r} from the frontend")
    return True


def _write_tensors(trainer: Any, directory: Path) -> None:
    from .. import checkpoint_io
    from .. import checkpoints as ckpt
    from .state import gathered_tensors

    weights, optimizer = gathered_tensors(trainer)
    if trainer.rank == 0:
        checkpoint_io.save_weights(weights, directory / ckpt.WEIGHTS_FILE)
        checkpoint_io.save_optimizer_state(optimizer, trainer.param_names, directory)


def _default_device(backend: str, local_rank: int) -> str:
    return f"cuda:{local_rank}" if backend == "nccl" else "cpu"


def _from_peer(exc: BaseException) -> bool:
    """Did this rank fail because another one did? Collectives and the store raise
    DistError subclasses when a peer vanishes; gloo says so in a RuntimeError."""
    import torch.distributed as dist

    if isinstance(exc, dist.DistError):
        return True
    text = str(exc)
    return any(
        marker in text
        for marker in ("Connection closed by peer", "Connection reset by peer", "Broken pipe")
    )


def _fail(channel: Any, place: RankPlace, exc: BaseException, *, peer: bool) -> None:
    """Report the error under err/{rank} (best effort: the store may be gone) and exit."""
    lines = traceback.format_exception(exc)
    sys.stderr.write("".join(lines))
    sys.stderr.flush()
    first = next((line for line in str(exc).splitlines() if line.strip()), "")
    summary = f"{type(exc).__name__}: {first}".strip()[:1000]
    report = {
        "rank": place.rank,
        "error": summary,
        "peer": peer,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "time": time.time(),
    }
    try:
        channel.put_json(f"err/{place.rank}", report)
        channel.count("errors", 1)
    except Exception:  # the frontend is gone; nobody is left to tell
        pass
    os._exit(EXIT_ERROR)


class _Heartbeat(threading.Thread):
    """Bumps hb/{rank}; ends the process when the frontend is gone or says abort."""

    def __init__(self, place: RankPlace, generation: int, parent_pid: int | None) -> None:
        super().__init__(name="arthex-heartbeat", daemon=True)
        self.place = place
        self.generation = generation
        self.parent_pid = parent_pid

    def run(self) -> None:
        from .channel import Channel, connect

        channel = Channel(connect(self.place.master_addr, self.place.master_port), self.generation)
        last_ok = time.monotonic()
        while True:
            if self.parent_pid is not None and os.getppid() != self.parent_pid:
                os._exit(EXIT_ORPHANED)
            try:
                channel.count(f"hb/{self.place.rank}", 1)
                if channel.has("abort"):
                    os._exit(EXIT_ABORTED)
                last_ok = time.monotonic()
            except Exception:
                if time.monotonic() - last_ok > STORE_LOST_S:
                    os._exit(EXIT_ORPHANED)
            time.sleep(HEARTBEAT_S)


if __name__ == "__main__":
    main()
