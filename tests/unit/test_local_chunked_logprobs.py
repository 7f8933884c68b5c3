"""Chunked log-probs against the plain full-logits computation (log_softmax + gather, written
here): values, entropies, every loss and every gradient, on random models and batches with
rows of different lengths, padding, and chunk sizes that do not divide the length."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    import torch

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from arthex.adapters.local.logprobs import (  # noqa: E402
    chunked_selected_logprobs,
    scatter_rows,
    selected_logprobs,
)
from arthex.adapters.local.loss import LossSettings, token_policy_loss  # noqa: E402
from arthex.adapters.local.packing import PackedBatch  # noqa: E402

TOL = 1e-5
VOCAB = 97
CHUNKS = [1, 3, 7, 64, 10_000]  # 3 and 7 divide none of the selected counts below


def oracle(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(log p(target), entropy) from whole logits, as the trainer computed them before."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    entropy = -(logp.exp() * logp).sum(-1)
    return logp.gather(-1, targets[:, None]).squeeze(-1), entropy


@pytest.mark.parametrize("chunk", CHUNKS)
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("frozen", [False, True], ids=["trained-head", "frozen-head"])
def test_the_chunked_head_gives_the_plain_values_and_gradients(
    chunk: int, bias: bool, frozen: bool
) -> None:
    gen = torch.Generator().manual_seed(chunk)
    head = torch.nn.Linear(16, VOCAB, bias=bias)
    with torch.no_grad():
        head.weight.copy_(torch.randn(VOCAB, 16, generator=gen))
        if head.bias is not None:
            head.bias.copy_(torch.randn(VOCAB, generator=gen))
    head.requires_grad_(not frozen)  # a frozen head (LoRA's) takes the direct gradient
    hidden = torch.randn(23, 16, generator=gen, requires_grad=True)
    targets = torch.randint(0, VOCAB, (23,), generator=gen)
    upstream = torch.randn(23, generator=gen)

    chosen, entropy = chunked_selected_logprobs(head, hidden, targets, chunk)
    (chosen * upstream).sum().backward()  # type: ignore[no-untyped-call]
    mine = [hidden.grad, *(p.grad for p in head.parameters())]
    hidden.grad = None
    head.zero_grad(set_to_none=True)

    want, want_entropy = oracle(head(hidden), targets)
    (want * upstream).sum().backward()  # type: ignore[no-untyped-call]
    theirs = [hidden.grad, *(p.grad for p in head.parameters())]

    assert torch.allclose(chosen, want, atol=TOL)
    assert torch.allclose(entropy, want_entropy, atol=TOL)
    assert not entropy.requires_grad
    for a, b in zip(mine, theirs, strict=True):
        assert (a is None) == (b is None)
        if a is not None and b is not None:
            assert torch.allclose(a, b, atol=TOL)
    assert mine[0] is not None


class WrappedHead(torch.nn.Linear):
    """Not a plain Linear (as a LoRA-wrapped head is not): the checkpointed path."""


@pytest.mark.parametrize("chunk", [3, 64])
def test_another_kind_of_head_runs_chunk_by_chunk_with_the_same_numbers(chunk: int) -> None:
    gen = torch.Generator().manual_seed(5)
    head = WrappedHead(8, VOCAB)
    hidden = torch.randn(10, 8, generator=gen, requires_grad=True)
    targets = torch.randint(0, VOCAB, (10,), generator=gen)
    chosen, entropy = chunked_selected_logprobs(head, hidden, targets, chunk)
    chosen.sum().backward()  # type: ignore[no-untyped-call]
    mine = (hidden.grad, head.weight.grad)
    hidden.grad, head.weight.grad = None, None
    want, want_entropy = oracle(torch.nn.functional.linear(hidden, head.weight, head.bias), targets)
    want.sum().backward()  # type: ignore[no-untyped-call]
    assert torch.allclose(chosen, want, atol=TOL)
    assert torch.allclose(entropy, want_entropy, atol=TOL)
    assert torch.allclose(mine[0], hidden.grad, atol=TOL)  # type: ignore[arg-type]
    assert torch.allclose(mine[1], head.weight.grad, atol=TOL)  # type: ignore[arg-type]


def test_a_chunk_below_one_is_refused() -> None:
    head = torch.nn.Linear(4, VOCAB)
    with pytest.raises(ValueError, match="chunk size must be >= 1"):
        chunked_selected_logprobs(head, torch.zeros(2, 4), torch.zeros(2, dtype=torch.long), 0)


# --- whole models, whole losses ------------------------------------------------------------


def tiny_llama(tied: bool, seed: int = 0) -> Any:
    config = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=tied,
    )
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(config)
    return model.eval()


def random_batch(lengths: list[int], width: int, seed: int) -> PackedBatch:
    """Right-padded rows of the given lengths, the first few tokens of each a prompt."""
    gen = torch.Generator().manual_seed(seed)
    rows = len(lengths)
    tokens = torch.zeros((rows, width), dtype=torch.long)
    mask = torch.zeros((rows, width), dtype=torch.bool)
    segments = torch.full((rows, width), -1)
    for r, n in enumerate(lengths):
        tokens[r, :n] = torch.randint(1, VOCAB, (n,), generator=gen)
        mask[r, 3:n] = True
        segments[r, :n] = 0
    old = torch.where(mask, -torch.rand((rows, width), generator=gen) * 5, math.nan)
    old[0, 4] = math.nan  # an unknown sampling logprob
    return PackedBatch(
        tokens=tokens,
        mask=mask,
        old_logprobs=old,
        advantages=torch.randn((rows, width), generator=gen) * mask,
        weights=mask.float() * (0.5 + torch.rand((rows, width), generator=gen)),
        position_ids=torch.arange(width).expand(rows, width).clone(),
        segment_ids=segments,
        num_groups=1,
        num_groups_trainable=1,
        num_trajectories_trainable=rows,
        num_dropped_too_long=0,
    )


def grads(model: Any) -> dict[str, torch.Tensor]:
    out = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return out


def plain_path(
    model: Any, batch: PackedBatch, settings: LossSettings, ref: torch.Tensor | None
) -> tuple[torch.Tensor, float]:
    logits = model(input_ids=batch.tokens, position_ids=batch.position_ids).logits
    new, entropy = oracle(logits[:, :-1].reshape(-1, VOCAB), batch.tokens[:, 1:].reshape(-1))
    new = new.reshape(batch.tokens.shape[0], -1)
    selected = batch.mask[:, 1:]
    entropy_sum = float(entropy.detach().reshape(new.shape)[selected].sum())
    return token_policy_loss(new, entropy_sum, batch, settings, normalizer=11.0, ref_logprobs=ref)[
        0
    ], entropy_sum


LOSSES = [
    LossSettings(kind="cispo"),
    LossSettings(kind="ppo", clip_low=0.2, clip_high=0.2),
    LossSettings(kind="importance_sampling"),
    LossSettings(kind="cispo", kl_coef=0.3),
]


@pytest.mark.parametrize("settings", LOSSES, ids=["cispo", "ppo", "is", "kl"])
@pytest.mark.parametrize("chunk", [3, 7, 10_000])
@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
@pytest.mark.parametrize("frozen", [False, True], ids=["trained-head", "frozen-head"])
def test_every_loss_and_gradient_matches_the_full_logits_path(
    settings: LossSettings, chunk: int, tied: bool, frozen: bool
) -> None:
    model = tiny_llama(tied)
    model.get_output_embeddings().requires_grad_(not frozen)
    batch = random_batch([12, 7, 9], 12, seed=chunk)
    ref = -torch.rand((3, 11)) * 4 if settings.kl_coef else None

    select = batch.mask[:, 1:]
    chosen, entropy = selected_logprobs(
        model, select, chunk, input_ids=batch.tokens, position_ids=batch.position_ids
    )
    loss, stats = token_policy_loss(
        scatter_rows(chosen, select),
        float(entropy.sum()),
        batch,
        settings,
        normalizer=11.0,
        ref_logprobs=ref,
    )
    loss.backward()  # type: ignore[no-untyped-call]
    mine = grads(model)

    want, want_entropy = plain_path(model, batch, settings, ref)
    want.backward()  # type: ignore[no-untyped-call]
    theirs = grads(model)

    assert abs(loss.item() - want.item()) <= TOL
    assert abs(stats.entropy_sum - want_entropy) <= TOL * max(1.0, abs(want_entropy))
    assert mine.keys() == theirs.keys()
    # a tied head's gradient is the embeddings'; a frozen one has none
    assert ("lm_head.weight" in mine) == (not tied and not frozen)
    for name in theirs:
        assert torch.allclose(mine[name], theirs[name], atol=TOL), name


def test_left_padding_with_an_attention_mask_matches_too() -> None:
    model = tiny_llama(True)
    batch = random_batch([10, 10], 10, seed=1)
    attention = torch.ones((2, 10), dtype=torch.long)
    attention[1, :2] = 0  # two pads before the second row's tokens
    batch.mask[1, :3] = False
    select = batch.mask[:, 1:]
    chosen, _ = selected_logprobs(
        model, select, 4, input_ids=batch.tokens, attention_mask=attention
    )
    logits = model(input_ids=batch.tokens, attention_mask=attention).logits
    want, _ = oracle(logits[:, :-1][select], batch.tokens[:, 1:][select])
    assert torch.allclose(chosen, want, atol=TOL)


def test_sft_cross_entropy_and_its_gradient_match() -> None:
    model = tiny_llama(False)
    gen = torch.Generator().manual_seed(3)
    tokens = torch.randint(1, VOCAB, (2, 9), generator=gen)
    targets = torch.zeros((2, 9))
    targets[0, 4:9] = 1.0
    targets[1, 2:6] = 1.0  # then padding
    select = targets[:, 1:] != 0
    chosen, _ = selected_logprobs(model, select, 3, input_ids=tokens)
    loss = -(chosen * targets[:, 1:][select]).sum() / 9.0
    loss.backward()  # type: ignore[no-untyped-call]
    mine = grads(model)
    logits = model(input_ids=tokens).logits
    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    picked = logp.gather(-1, tokens[:, 1:, None]).squeeze(-1)
    want = -(picked * targets[:, 1:]).sum() / 9.0
    want.backward()  # type: ignore[no-untyped-call]
    assert abs(loss.item() - want.item()) <= TOL
    for name, value in grads(model).items():
        assert torch.allclose(mine[name], value, atol=TOL), name


def test_nothing_selected_still_reaches_every_weight_with_zero_gradient() -> None:
    model = tiny_llama(True)
    tokens = torch.randint(1, VOCAB, (1, 6))
    select = torch.zeros((1, 5), dtype=torch.bool)
    chosen, _ = selected_logprobs(model, select, 4, input_ids=tokens)
    assert chosen.shape == (0,)
    chosen.sum().backward()  # type: ignore[no-untyped-call]
    for name, p in model.named_parameters():
        assert p.grad is not None and float(p.grad.abs().sum()) == 0.0, name


def test_the_model_keeps_its_own_head_afterwards() -> None:
    model = tiny_llama(False)
    tokens = torch.randint(1, VOCAB, (1, 6))
    selected_logprobs(model, torch.ones((1, 5), dtype=torch.bool), 2, input_ids=tokens)
    assert model(input_ids=tokens).logits.shape == (1, 6, VOCAB)
    assert "forward" not in vars(model.get_output_embeddings())
