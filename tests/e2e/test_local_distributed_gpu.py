"""Sharded training on GPUs with NCCL (needs 2 or more CUDA GPUs; skipped otherwise). Run by
benchmarks/gpu/distributed.sh on a multi-GPU machine.

The CPU tests (test_local_distributed.py, gloo) carry the exact oracles; here the same flows
run where NCCL, CUDA devices and bfloat16 LoRA weights replace gloo and float32: GPU reductions
are not bit-reproducible, so equivalence is checked at 1e-4, while moving a checkpoint between
rank counts is still bit for bit (loading copies bits, it computes nothing).
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("fastapi")

from arthex.adapters.local import LocalBackend  # noqa: E402
from arthex.core.errors import BackendError  # noqa: E402

from .test_local_distributed import (  # noqa: E402
    CALLS,
    RUN,
    live_matches_files,
    run_with,
    step_dir,
    tensors,
    train_all,
)
from .test_local_distributed import base_model as base_model  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.e2e,
    pytest.mark.skipif(
        not torch.cuda.is_available() or torch.cuda.device_count() < 2,
        reason="needs 2 or more CUDA GPUs",
    ),
]
GPU_TOLERANCE = 1e-4


def test_two_gpus_train_like_one_gpu(base_model: str, tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    solo = run_with(
        LocalBackend(full_finetune=True, device="cuda:0", engine="torch"),
        base_model,
        one,
        lambda b: train_all(b, CALLS),
    )
    ranks = run_with(
        LocalBackend(full_finetune=True, world_size=2, engine="torch"),
        base_model,
        two,
        lambda b: train_all(b, CALLS),
    )
    for a, b in zip(solo, ranks, strict=True):
        assert all(abs(a[k] - b[k]) <= GPU_TOLERANCE for k in a), (a, b)
    final_one, final_two = tensors(step_dir(one, 5)), tensors(step_dir(two, 5))
    worst = max(float((final_one[k] - final_two[k]).abs().max()) for k in final_one)
    assert worst <= GPU_TOLERANCE


def test_a_lora_run_moves_between_gpu_counts_bit_for_bit(base_model: str, tmp_path: Path) -> None:
    async def two_calls(b: LocalBackend) -> None:
        await train_all(b, CALLS[:2])

    async def resume(b: LocalBackend) -> list[str]:
        differing = live_matches_files(b, step_dir(tmp_path, await b.get_step(RUN)))
        await train_all(b, CALLS[2:3])
        return differing

    ranks = max(2, torch.cuda.device_count())
    run_with(
        LocalBackend(full_finetune=False, world_size=ranks, engine="torch"),
        base_model,
        tmp_path,
        two_calls,
    )
    assert (
        run_with(LocalBackend(device="cuda:0", engine="torch"), base_model, tmp_path, resume) == []
    )
    assert run_with(LocalBackend(world_size=2, engine="torch"), base_model, tmp_path, resume) == []


def test_a_killed_gpu_rank_ends_the_call_within_thirty_seconds(
    base_model: str, tmp_path: Path
) -> None:
    """NCCL does not notice a dead peer by itself (a collective just waits); the supervisor
    must end the call."""
    import time

    from arthex.core.config import TrainConfig
    from arthex.testing.builders import synthetic_groups

    async def body(b: LocalBackend) -> tuple[str, float]:
        pids = b.rank_processes(RUN)
        sent = 0.0
        try:
            async for _ in b.train(
                RUN,
                synthetic_groups(2, 4),
                TrainConfig(learning_rate=1e-3, grad_accumulation_sequences=1),
            ):
                if not sent:
                    os.kill(pids[1], signal.SIGKILL)
                    sent = time.monotonic()
        except BackendError as exc:
            return str(exc), time.monotonic() - sent
        return "", 0.0

    async def guarded(b: LocalBackend) -> tuple[str, float]:
        return await asyncio.wait_for(body(b), timeout=120)

    message, took = run_with(
        LocalBackend(full_finetune=True, world_size=2, engine="torch"),
        base_model,
        tmp_path,
        guarded,
    )
    assert "trainer rank 1 of 2 was killed by SIGKILL" in message
    assert took < 30.0
