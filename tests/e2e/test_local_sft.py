"""LocalBackend's SFT specifics: Adam's state per objective (reset on a switch between RL and
SFT, kept across a restart), and the checkpoint that remembers which objective it holds."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

from arthex.adapters.local import LocalBackend
from arthex.core.config import TrainConfig
from arthex.core.conversations import conversation_from
from arthex.core.identity import ModelSpec, RunRef
from arthex.core.sft import TrainSFTConfig
from arthex.testing.builders import synthetic_groups
from arthex.testing.contracts.sft import SFT_DATA
from arthex.testing.tiny_model import tiny_model

pytestmark = pytest.mark.e2e

DATA = [
    conversation_from([{"role": "user", "content": q}, {"role": "assistant", "content": a}])
    for q, a in SFT_DATA
]
TWO_STEPS = TrainSFTConfig(learning_rate=1e-3, batch_size=3, epochs=2)


def _adam_steps(backend: LocalBackend, run: RunRef) -> float:
    _, optimizer = backend.training_tensors(run)
    counts = {float(v.item()) for k, v in optimizer.items() if k.endswith(".step")}
    assert len(counts) == 1, counts
    return counts.pop()


def _mode(spec: ModelSpec, step: int) -> str:
    folder = Path(spec.base_path) / "p" / "models" / "m" / "checkpoints" / f"{step:04d}"
    return str(json.loads((folder / "trainer_state.json").read_text())["optimizer_mode"])


def test_adam_starts_afresh_when_a_run_switches_objective_and_resumes_its_own(
    tmp_path: Path,
) -> None:
    spec = ModelSpec(
        RunRef("p", "m"), base_model=tiny_model(tmp_path / "tiny"), base_path=str(tmp_path)
    )

    async def first() -> list[float]:
        backend = LocalBackend(engine="torch", full_finetune=True)
        try:
            await backend.register(spec)
            counts = []
            async for _m in backend.train_sft(spec.run, DATA, TWO_STEPS):
                pass
            counts.append(_adam_steps(backend, spec.run))
            async for _m in backend.train(
                spec.run, synthetic_groups(), TrainConfig(learning_rate=1e-3)
            ):
                pass
            counts.append(_adam_steps(backend, spec.run))
            async for _m in backend.train_sft(spec.run, DATA, TWO_STEPS):
                pass
            counts.append(_adam_steps(backend, spec.run))
            return counts
        finally:
            await backend.close()

    async def resumed() -> float:
        backend = LocalBackend(engine="torch", full_finetune=True)
        try:
            await backend.register(spec)
            async for _m in backend.train_sft(spec.run, DATA, TWO_STEPS):
                pass
            return _adam_steps(backend, spec.run)
        finally:
            await backend.close()

    # SFT: 2 Adam steps; RL starts afresh (1); SFT starts afresh again (2)
    assert asyncio.run(first()) == [2.0, 1.0, 2.0]
    assert [_mode(spec, step) for step in (1, 2, 3)] == ["sft", "rl", "sft"]
    # a restart loads step 3's SFT state: the next SFT call continues it (2 + 2)
    assert asyncio.run(resumed()) == 4.0
