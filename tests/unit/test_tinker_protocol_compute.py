"""A Tinker training run computes through the LocalBackend's parts: its target logprobs are
a plain transformers forward's, with or without layer checkpointing, and a second run on the
same base adds its adapter and optimizer state only, never a copy of the base's weights."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

if TYPE_CHECKING:
    import torch

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from arthex.apps.server.tinker_protocol.base_model import BaseModel, LoraSettings  # noqa: E402
from arthex.apps.server.tinker_protocol.compute import AdamSettings, TrainingRun  # noqa: E402
from arthex.apps.server.tinker_protocol.losses import DatumIn  # noqa: E402

LORA = LoraSettings(rank=4, seed=3)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    from arthex.testing.tiny_model import tiny_model

    return tiny_model(tmp_path_factory.getbasetemp() / "tiny-model")


def datums(vocab: int) -> list[DatumIn]:
    generator = np.random.default_rng(7)
    out = []
    for length in (9, 5, 13):
        tokens = generator.integers(0, vocab, length).tolist()
        targets = generator.integers(0, vocab, length)
        weights = generator.random(length).astype(np.float32)
        out.append(
            DatumIn(
                tokens=tokens,
                inputs={
                    "target_tokens": torch.tensor(targets),
                    "weights": torch.tensor(weights),
                },
            )
        )
    return out


def plain_logprobs(model: Any, datum: DatumIn) -> Any:
    """The oracle: one datum alone through the model's ordinary forward, full log-softmax."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([datum.tokens])).logits[0].float()
    logp = torch.log_softmax(logits, dim=-1)
    return logp.gather(-1, datum.inputs["target_tokens"].long()[:, None]).squeeze(-1)


def trained_a_step(run: TrainingRun, data: list[DatumIn]) -> None:
    run.forward_backward(data, "cross_entropy", {}, forward_only=False)
    run.optim_step(AdamSettings(learning_rate=5e-2))


def test_target_logprobs_are_a_plain_forwards(tiny: str) -> None:
    base = BaseModel(tiny)
    run = TrainingRun(base, LORA)
    data = datums(base.vocab_size)
    trained_a_step(run, data)  # a LoRA that is not zero, so the adapter is in the numbers
    outputs, loss = run.forward_backward(data, "cross_entropy", {}, forward_only=True)
    expected_loss = 0.0
    for datum, got in zip(data, outputs):
        want = plain_logprobs(run.model, datum)
        assert got.shape == (len(datum.tokens),)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=0, atol=1e-5)
        expected_loss += float(-(want * datum.inputs["weights"]).sum())
    assert loss == pytest.approx(expected_loss, abs=1e-4)


@pytest.mark.parametrize("checkpointing", [True, False])
def test_gradients_match_a_plain_backward(tiny: str, checkpointing: bool) -> None:
    base = BaseModel(tiny, gradient_checkpointing=checkpointing)
    run = TrainingRun(base, LORA)
    assert run._recompute.on is checkpointing
    data = datums(base.vocab_size)
    run.forward_backward(data, "cross_entropy", {}, forward_only=False)
    got = {name: p.grad.clone() for name, p in zip(run.names, run.params)}
    for p in run.params:
        p.grad = None
    # The oracle's graph: each datum alone, full logits, summed weighted loss.
    for datum in data:
        logits = run.model(input_ids=torch.tensor([datum.tokens])).logits[0].float()
        logp = torch.log_softmax(logits, dim=-1)
        lp = logp.gather(-1, datum.inputs["target_tokens"].long()[:, None]).squeeze(-1)
        (-(lp * datum.inputs["weights"]).sum()).backward()  # type: ignore[no-untyped-call]
    for name, p in zip(run.names, run.params):
        np.testing.assert_allclose(got[name].numpy(), p.grad.numpy(), rtol=1e-4, atol=1e-6)


def storages(model: Any) -> dict[int, int]:
    """Distinct parameter storages of a model: data pointer -> bytes."""
    return {
        p.untyped_storage().data_ptr(): p.untyped_storage().nbytes() for p in model.parameters()
    }


def test_a_second_run_adds_only_its_adapter_and_optimizer(tiny: str, tmp_path: Path) -> None:
    base = BaseModel(tiny)
    first, second = TrainingRun(base, LORA), TrainingRun(base, LORA)
    data = datums(base.vocab_size)
    trained_a_step(first, data)
    trained_a_step(second, data)
    base_bytes = sum(storages(base.module).values())
    one, two = storages(first.model), storages(second.model)
    together = {**one, **two}
    adapter_bytes = sum(p.untyped_storage().nbytes() for p in second.params)
    # What the second run brought: only its own trainable parameters...
    assert sum(together.values()) - sum(one.values()) == adapter_bytes
    assert adapter_bytes < base_bytes / 10
    # ...and both runs' frozen weights are the base's own tensors.
    assert set(storages(base.module)) <= set(one) & set(two)
    assert second.optimizer is not None
    moments = [t for state in second.optimizer.state.values() for t in state.values()]
    optimizer_bytes = sum(t.untyped_storage().nbytes() for t in moments if t.ndim > 0)
    assert optimizer_bytes == 2 * adapter_bytes  # AdamW's two moments per trained value
    # The adapters stayed independent: training one did not move the other.
    trained_a_step(first, data)
    assert any(not torch.equal(a, b) for a, b in zip(first.params, second.params))


def test_optimizer_state_round_trips_through_the_local_checkpoint_format(
    tiny: str, tmp_path: Path
) -> None:
    from arthex.adapters.local.checkpoints import OPTIMIZER_FILE, OPTIMIZER_META_FILE

    base = BaseModel(tiny)
    data = datums(base.vocab_size)
    saved = TrainingRun(base, LORA)
    trained_a_step(saved, data)
    saved.save(tmp_path / "ckpt", meta={}, with_optimizer=True)
    assert (tmp_path / "ckpt" / OPTIMIZER_FILE).is_file()
    assert (tmp_path / "ckpt" / OPTIMIZER_META_FILE).is_file()
    resumed = TrainingRun(base, LoraSettings(rank=4, seed=99))
    resumed.load(tmp_path / "ckpt", with_optimizer=True)
    # The next step from the checkpoint equals the next step of the run that saved it.
    trained_a_step(saved, data)
    trained_a_step(resumed, data)
    for a, b in zip(saved.params, resumed.params):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
