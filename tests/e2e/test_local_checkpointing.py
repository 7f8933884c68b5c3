"""Activation checkpointing changes memory, never the numbers: the LocalBackend trained with
`gradient_checkpointing=True` gives, step for step, the metrics and weights (and Adam's
moments) of the same training without it, for LoRA, full fine-tuning, SFT and two FSDP2 ranks
(in one process with the MLP run 16 tokens at a time, so its chunks are exercised on the tiny
model's short rows); and the layers really are recomputed (the oracle is the unchecked run)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("fastapi")

from arthex.adapters.local import LocalBackend, layers  # noqa: E402
from arthex.adapters.local.layers import decoder_layers  # noqa: E402
from arthex.adapters.local.packing import pack  # noqa: E402
from arthex.adapters.local.trainer import PolicyTrainer, TrainerSettings  # noqa: E402
from arthex.adapters.local.trainer_protocol import Update  # noqa: E402
from arthex.core.config import TrainConfig  # noqa: E402
from arthex.core.conversations import conversation_from  # noqa: E402
from arthex.core.errors import InvalidInputError  # noqa: E402
from arthex.core.identity import ModelSpec, RunRef  # noqa: E402
from arthex.core.sft import TrainSFTConfig  # noqa: E402
from arthex.testing.builders import synthetic_groups  # noqa: E402
from arthex.testing.contracts.sft import SFT_DATA  # noqa: E402
from arthex.testing.tiny_model import tiny_model  # noqa: E402

pytestmark = pytest.mark.e2e

RUN = RunRef("proj", "ckpt")
TOL = 1e-6
CONFIGS = [
    TrainConfig(learning_rate=1e-3, grad_accumulation_sequences=4),
    TrainConfig(learning_rate=1e-3, loss_fn="ppo", kl_penalty_coef=0.1),
]
SFT = [
    conversation_from([{"role": "user", "content": q}, {"role": "assistant", "content": a}])
    for q, a in SFT_DATA
]


@pytest.fixture(scope="module")
def base_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    return tiny_model(tmp_path_factory.mktemp("tiny") / "model")


Steps = Callable[[LocalBackend], AsyncIterator[Mapping[str, float]]]


def rl_steps(backend: LocalBackend) -> AsyncIterator[Mapping[str, float]]:
    async def steps() -> AsyncIterator[Mapping[str, float]]:
        for i, config in enumerate(CONFIGS):
            async for metrics in backend.train_steps(RUN, synthetic_groups(2, 4, offset=i), config):
                yield dict(metrics)

    return steps()


def sft_steps(backend: LocalBackend) -> AsyncIterator[Mapping[str, float]]:
    config = TrainSFTConfig(learning_rate=1e-3, batch_size=3, epochs=2)
    return backend.train_sft(RUN, SFT, config)


def trained(
    base_model: str, root: Path, steps: Steps, **options: Any
) -> tuple[list[dict[str, float]], dict[str, Any]]:
    async def main() -> tuple[list[dict[str, float]], dict[str, Any]]:
        backend = LocalBackend(engine="torch", **options)
        try:
            await backend.register(ModelSpec(run=RUN, base_model=base_model, base_path=str(root)))
            metrics = [dict(m) async for m in steps(backend)]
            weights, optimizer = backend.training_tensors(RUN)
            return metrics, {**weights, **optimizer}
        finally:
            await backend.close()

    return asyncio.run(main())


def assert_same(a: tuple[list[dict[str, float]], dict[str, Any]], b: Any) -> None:
    (metrics_a, tensors_a), (metrics_b, tensors_b) = a, b
    assert len(metrics_a) == len(metrics_b) > 0
    for step, (x, y) in enumerate(zip(metrics_a, metrics_b, strict=True)):
        far = {k: (x[k], y[k]) for k in x if abs(x[k] - y[k]) > TOL}
        assert not far, f"step {step}: {far}"
    assert tensors_a.keys() == tensors_b.keys() and tensors_a
    worst = max(float((tensors_a[k] - tensors_b[k]).abs().max()) for k in tensors_a)
    assert worst <= TOL


@pytest.mark.parametrize("full_finetune", [True, False], ids=["full", "lora"])
def test_checkpointed_rl_steps_equal_the_plain_ones(
    base_model: str, tmp_path: Path, full_finetune: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = trained(base_model, tmp_path / "a", rl_steps, full_finetune=full_finetune)
    monkeypatch.setattr(layers, "MLP_CHUNK_TOKENS", 16)
    checked = trained(
        base_model,
        tmp_path / "b",
        rl_steps,
        full_finetune=full_finetune,
        gradient_checkpointing=True,
    )
    assert_same(plain, checked)


def test_checkpointed_sft_steps_equal_the_plain_ones(
    base_model: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = trained(base_model, tmp_path / "a", sft_steps, full_finetune=False)
    monkeypatch.setattr(layers, "MLP_CHUNK_TOKENS", 16)
    checked = trained(
        base_model, tmp_path / "b", sft_steps, full_finetune=False, gradient_checkpointing=True
    )
    assert_same(plain, checked)


@pytest.mark.slow
def test_two_checkpointed_ranks_equal_one_plain_process(base_model: str, tmp_path: Path) -> None:
    plain = trained(base_model, tmp_path / "a", rl_steps, full_finetune=False)
    ranks = trained(
        base_model,
        tmp_path / "b",
        rl_steps,
        full_finetune=False,
        world_size=2,
        gradient_checkpointing=True,
    )
    assert_same(plain, ranks)


@pytest.mark.parametrize("on", [True, False])
def test_each_layer_runs_twice_per_pass_only_when_checkpointed(base_model: str, on: bool) -> None:
    trainer = PolicyTrainer(
        TrainerSettings(base_model=base_model, full_finetune=False, gradient_checkpointing=on)
    )
    trainer.load(None)
    assert trainer.checkpointing is on
    calls: list[int] = []
    layers = decoder_layers(trainer.model, full=False)
    for index, layer in enumerate(layers):
        attention: Any = layer.self_attn
        attention.register_forward_hook(lambda *_, i=index: calls.append(i))
    config = TrainConfig(learning_rate=1e-3)
    batch = pack(synthetic_groups(1, 2), config, max_length=trainer.max_length, pad_token_id=0)
    for _ in trainer.train(Update(batch, config, reference=None)):
        pass
    assert sorted(calls) == sorted(list(range(len(layers))) * (2 if on else 1))


def test_auto_decides_per_micro_batch_and_bad_values_are_refused(base_model: str) -> None:
    trainer = PolicyTrainer(TrainerSettings(base_model=base_model, full_finetune=False))
    trainer.load(None)
    seen = [trainer.checkpointing]  # 8192 tokens of the tiny model keep ~35 MB
    # the tiny model keeps 2 layers x 1,056 values x 4 B = 8,448 B a token: 1 GiB at 127,100
    for tokens in (127_000, 128_000):
        trainer.forward_of(tokens)
        seen.append(trainer.checkpointing)
    assert seen == [False, False, True]
    with pytest.raises(InvalidInputError, match="gradient_checkpointing"):
        LocalBackend(gradient_checkpointing="yes")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="micro_batch_tokens"):
        LocalBackend(micro_batch_tokens=0)
    with pytest.raises(InvalidInputError, match="logprob_calculation_chunk_size"):
        LocalBackend(logprob_calculation_chunk_size=1.5)  # type: ignore[arg-type]
