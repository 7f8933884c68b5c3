"""The trainer leaves out the attention mask for right-padded rows: prove it changes nothing
the loss reads, and that a row padded before a real token keeps its mask."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import attrs  # noqa: E402

from arthex.adapters.local.packing import pack  # noqa: E402
from arthex.adapters.local.trainer import _padding_mask  # noqa: E402
from arthex.core.config import TrainConfig  # noqa: E402
from arthex.testing.builders import synthetic_groups  # noqa: E402
from arthex.testing.tiny_model import tiny_model  # noqa: E402


def test_right_padded_rows_give_the_same_logits_without_the_mask(tmp_path: Path) -> None:
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_model(tmp_path / "tiny"))
    model.eval()
    batch = pack(synthetic_groups(), TrainConfig(), max_length=1024, pad_token_id=0)
    real = batch.segment_ids >= 0
    assert bool((~real).any()), "the batch should hold padding for this test to mean anything"
    assert _padding_mask(batch) is None
    with torch.no_grad():
        fast = model(input_ids=batch.tokens, position_ids=batch.position_ids).logits
        masked = model(
            input_ids=batch.tokens, attention_mask=real.long(), position_ids=batch.position_ids
        ).logits
    assert torch.allclose(fast[real], masked[real], atol=1e-5)


def test_a_pad_before_a_real_token_keeps_the_mask() -> None:
    batch = pack(synthetic_groups(), TrainConfig(), max_length=1024, pad_token_id=0)
    left_padded = attrs.evolve(batch, segment_ids=batch.segment_ids.flip(1))
    mask = _padding_mask(left_padded)
    assert mask is not None
    assert torch.equal(mask, (left_padded.segment_ids >= 0).long())
