"""Forward/backward requests of several runs in one pass over their shared base give each run
what it gets alone: the same logprobs, loss and gradient (oracle: each run's own unbatched
`TrainingRun.forward_backward`, on a twin run holding the same adapter)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytest

if TYPE_CHECKING:
    import torch

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from arthex.apps.server.tinker_protocol.base_model import BaseModel, LoraSettings  # noqa: E402
from arthex.apps.server.tinker_protocol.batched import (  # noqa: E402
    Request,
    forward_backward_many,
)
from arthex.apps.server.tinker_protocol.compute import TrainingRun  # noqa: E402
from arthex.apps.server.tinker_protocol.errors import UserError  # noqa: E402
from arthex.apps.server.tinker_protocol.losses import DatumIn  # noqa: E402


@pytest.fixture(scope="module", params=[False, True], ids=["stored", "recomputed"])
def base(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> BaseModel:
    """The tiny base, its layers' activations stored or recomputed in backward (where the
    per-row adapters must still be in place)."""
    from arthex.testing.tiny_model import tiny_model

    model = tiny_model(tmp_path_factory.getbasetemp() / "tiny-model")
    return BaseModel(model, gradient_checkpointing=request.param)


def datums(vocab: int, lengths: tuple[int, ...], seed: int) -> list[DatumIn]:
    generator = np.random.default_rng(seed)
    out = []
    for length in lengths:
        out.append(
            DatumIn(
                tokens=generator.integers(0, vocab, length).tolist(),
                inputs={
                    "target_tokens": torch.tensor(generator.integers(0, vocab, length)),
                    "weights": torch.tensor(generator.random(length).astype(np.float32)),
                    "logprobs": torch.tensor(-generator.random(length).astype(np.float32)),
                    "advantages": torch.tensor(generator.normal(size=length).astype(np.float32)),
                },
            )
        )
    return out


def twins(base: BaseModel, lora: LoraSettings, seed: int) -> tuple[TrainingRun, TrainingRun]:
    """Two runs with one adapter, every LoRA matrix random (B too: a zero B, as a new
    adapter has, would hide a delta applied to the wrong rows)."""
    generator = torch.Generator().manual_seed(seed)
    one, two = TrainingRun(base, lora), TrainingRun(base, lora)
    with torch.no_grad():
        for a, b in zip(one.params, two.params):
            a.copy_(torch.randn(a.shape, generator=generator) * 0.05)
            b.copy_(a)
    return one, two


def grads(run: TrainingRun) -> list[torch.Tensor]:
    assert all(p.grad is not None for p in run.params)
    return [p.grad.clone() for p in run.params if p.grad is not None]


@pytest.mark.parametrize("unembed", [True, False])
def test_two_runs_batched_equal_each_alone(base: BaseModel, unembed: bool) -> None:
    lora = LoraSettings(rank=4, train_unembed=unembed)
    first, first_alone = twins(base, lora, 1)
    second, second_alone = twins(base, lora, 2)
    data_1 = datums(base.vocab_size, (9, 5, 13), 7)
    data_2 = datums(base.vocab_size, (21, 3), 8)  # wider: the first run's rows get padding
    config = {"clip_low_threshold": 0.7}
    together = forward_backward_many(
        [
            Request(first, data_1, "cross_entropy", {}),
            Request(second, data_2, "importance_sampling", config),
        ],
        forward_only=False,
    )
    alone = [
        first_alone.forward_backward(data_1, "cross_entropy", {}, forward_only=False),
        second_alone.forward_backward(data_2, "importance_sampling", config, forward_only=False),
    ]
    for (outputs, loss), (expected_outputs, expected_loss) in zip(together, alone):
        assert loss == pytest.approx(expected_loss, abs=1e-5, rel=1e-5)
        assert len(outputs) == len(expected_outputs)
        for got, want in zip(outputs, expected_outputs):
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    for run, oracle in ((first, first_alone), (second, second_alone)):
        for got, want in zip(grads(run), grads(oracle), strict=True):
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    # A second pass adds to the gradients, as a second request alone does.
    forward_backward_many([Request(second, data_2, "cross_entropy", {})], forward_only=False)
    second_alone.forward_backward(data_2, "cross_entropy", {}, forward_only=False)
    for got, want in zip(grads(second), grads(second_alone), strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_forward_only_adds_no_gradient(base: BaseModel) -> None:
    lora = LoraSettings(rank=4)
    first, first_alone = twins(base, lora, 3)
    second, _ = twins(base, lora, 4)
    data = datums(base.vocab_size, (6, 4), 9)
    together = forward_backward_many(
        [Request(first, data, "cross_entropy", {}), Request(second, data, "cross_entropy", {})],
        forward_only=True,
    )
    outputs, loss = first_alone.forward_backward(data, "cross_entropy", {}, forward_only=True)
    assert together[0][1] == pytest.approx(loss, abs=1e-5)
    for got, want in zip(together[0][0], outputs):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert all(p.grad is None for p in first.params + second.params)


def test_bad_inputs_fail_before_any_compute(base: BaseModel) -> None:
    lora = LoraSettings(rank=4)
    first, _ = twins(base, lora, 5)
    second, _ = twins(base, lora, 6)
    good = datums(base.vocab_size, (6,), 10)
    bad = [DatumIn(tokens=[1, 2], inputs={"target_tokens": torch.tensor([1, 2])})]
    with pytest.raises(UserError, match="weights"):
        forward_backward_many(
            [Request(first, good, "cross_entropy", {}), Request(second, bad, "cross_entropy", {})],
            forward_only=False,
        )
    assert all(p.grad is None for p in first.params + second.params)
