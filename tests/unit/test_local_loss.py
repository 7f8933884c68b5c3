"""The policy loss on hand-computed cases: the shift, CISPO vs PPO vs IS, NaN, clamps, KL."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    import torch

torch = pytest.importorskip("torch")

from arthex.adapters.local.loss import (  # noqa: E402
    LossSettings,
    LossStats,
    policy_loss,
    shifted_logprobs,
)
from arthex.adapters.local.packing import PackedBatch  # noqa: E402
from arthex.core.config import TrainConfig  # noqa: E402

NAN = math.nan


def batch_of(
    tokens: list[int],
    mask: list[bool],
    old: list[float],
    advantages: list[float],
    weights: list[float] | None = None,
) -> PackedBatch:
    n = len(tokens)
    return PackedBatch(
        tokens=torch.tensor([tokens]),
        mask=torch.tensor([mask]),
        old_logprobs=torch.tensor([old], dtype=torch.float32),
        advantages=torch.tensor([advantages], dtype=torch.float32),
        weights=torch.tensor([weights or [1.0 if m else 0.0 for m in mask]], dtype=torch.float32),
        position_ids=torch.arange(n).unsqueeze(0),
        segment_ids=torch.zeros((1, n), dtype=torch.int64),
        num_groups=1,
        num_groups_trainable=1,
        num_trajectories_trainable=1,
        num_dropped_too_long=0,
    )


def logits_from_probs(rows: list[list[float]]) -> torch.Tensor:
    """Logits whose softmax is exactly the given distributions (one per position)."""
    return torch.log(torch.tensor([rows], dtype=torch.float32)).requires_grad_(True)


# Vocab of 4. Position 0 predicts token 1, position 1 predicts token 2; position 2 predicts
# nothing (it is the last).
PROBS = [[0.1, 0.5, 0.2, 0.2], [0.25, 0.25, 0.25, 0.25], [0.7, 0.1, 0.1, 0.1]]
TOKENS = [3, 1, 2]


def test_position_t_scores_token_t_plus_one() -> None:
    new, entropy = shifted_logprobs(logits_from_probs(PROBS), torch.tensor([TOKENS]))
    assert new.shape == (1, 2)
    assert new[0].tolist() == pytest.approx([math.log(0.5), math.log(0.25)])
    h0 = -sum(p * math.log(p) for p in PROBS[0])
    assert entropy[0].tolist() == pytest.approx([h0, math.log(4)])


def test_cispo_with_ratio_one_is_minus_advantage_times_logprob_over_tokens() -> None:
    # tokens 1 and 2 are completion tokens; old = new (ratio 1)
    batch = batch_of(
        TOKENS, [False, True, True], [NAN, math.log(0.5), math.log(0.25)], [0.0, 2.0, 2.0]
    )
    loss, stats = policy_loss(logits_from_probs(PROBS), batch, LossSettings(), normalizer=2)
    expected = -(2.0 * math.log(0.5) + 2.0 * math.log(0.25)) / 2
    assert loss.item() == pytest.approx(expected)
    assert stats.tokens == 2 and stats.clipped == 0
    assert stats.ratios.tolist() == pytest.approx([1.0, 1.0])


def test_the_first_token_never_counts_even_when_masked() -> None:
    batch = batch_of(TOKENS, [True, True, False], [-1.0, math.log(0.5), NAN], [1.0, 1.0, 0.0])
    loss, stats = policy_loss(logits_from_probs(PROBS), batch, LossSettings(), normalizer=1)
    assert stats.tokens == 1
    assert loss.item() == pytest.approx(-math.log(0.5))


def ratio_two_batch(advantage: float) -> PackedBatch:
    # new logprob of token 1 = log 0.5, old = log 0.25: ratio 2
    return batch_of(TOKENS[:2], [False, True], [NAN, math.log(0.25)], [0.0, advantage])


@pytest.mark.parametrize("advantage", [1.0, -1.0])
def test_loss_values_at_ratio_two(advantage: float) -> None:
    logits = logits_from_probs(PROBS[:2])
    cispo, _ = policy_loss(
        logits, ratio_two_batch(advantage), LossSettings.from_config(TrainConfig()), normalizer=1
    )
    ppo, ppo_stats = policy_loss(
        logits,
        ratio_two_batch(advantage),
        LossSettings.from_config(TrainConfig(loss_fn="ppo")),
        normalizer=1,
    )
    is_, is_stats = policy_loss(
        logits,
        ratio_two_batch(advantage),
        LossSettings.from_config(TrainConfig(loss_fn="importance_sampling")),
        normalizer=1,
    )
    # CISPO clips to [0, 5]: 2 stays, times A times log 0.5
    assert cispo.item() == pytest.approx(-2.0 * advantage * math.log(0.5))
    # PPO eps 0.2: -min(2A, 1.2A)
    assert ppo.item() == pytest.approx(-min(2 * advantage, 1.2 * advantage))
    # PPO's clip acts on ratio 2 only with a positive advantage (-min(-2, -1.2) is unclipped)
    assert ppo_stats.clipped == (1 if advantage > 0 else 0)
    assert is_.item() == pytest.approx(-2.0 * advantage)
    assert is_stats.clipped == 0


def test_cispo_gradient_treats_the_clipped_ratio_as_a_constant() -> None:
    logits = logits_from_probs(PROBS[:2])
    loss, _ = policy_loss(logits, ratio_two_batch(1.0), LossSettings(), normalizer=1)
    loss.backward()  # type: ignore[no-untyped-call]
    assert logits.grad is not None
    # d(-c·A·log p_1)/dlogits = -c·A·(onehot - p) with c = 2 held constant
    p = torch.tensor(PROBS[0])
    expected = -2.0 * (torch.nn.functional.one_hot(torch.tensor(1), 4).float() - p)
    assert logits.grad[0, 0].tolist() == pytest.approx(expected.tolist(), abs=1e-6)
    assert logits.grad[0, 1].abs().sum().item() == 0.0


def test_cispo_clips_big_ratios_at_one_plus_four() -> None:
    # old logprob log(0.05): ratio 10, clipped to 5
    batch = batch_of(TOKENS[:2], [False, True], [NAN, math.log(0.05)], [0.0, 1.0])
    loss, stats = policy_loss(logits_from_probs(PROBS[:2]), batch, LossSettings(), normalizer=1)
    assert loss.item() == pytest.approx(-5.0 * math.log(0.5))
    assert stats.clipped == 1
    assert stats.ratios.tolist() == pytest.approx([10.0])


def test_nan_old_logprob_means_ratio_one() -> None:
    batch = batch_of(TOKENS[:2], [False, True], [NAN, NAN], [0.0, 3.0])
    ppo, stats = policy_loss(
        logits_from_probs(PROBS[:2]),
        batch,
        LossSettings.from_config(TrainConfig(loss_fn="ppo")),
        normalizer=1,
    )
    assert ppo.item() == pytest.approx(-3.0)
    assert stats.ratios.tolist() == [1.0]


def test_log_ratio_is_clamped_at_twenty() -> None:
    batch = batch_of(TOKENS[:2], [False, True], [NAN, -1000.0], [0.0, 1.0])
    _, stats = policy_loss(
        logits_from_probs(PROBS[:2]), batch, LossSettings(kind="importance_sampling"), normalizer=1
    )
    assert stats.ratios.item() == pytest.approx(math.exp(20.0), rel=1e-5)


def test_weights_and_normaliser_scale_the_loss() -> None:
    batch = batch_of(
        TOKENS, [False, True, True], [NAN, NAN, NAN], [0.0, 1.0, 1.0], weights=[0.0, 1.5, 0.5]
    )
    loss, _ = policy_loss(
        logits_from_probs(PROBS),
        batch,
        LossSettings(kind="ppo", clip_low=0.2, clip_high=0.2),
        normalizer=4,
    )
    assert loss.item() == pytest.approx(-(1.5 + 0.5) / 4)


def test_kl_penalty_shifts_advantages_towards_the_mean_kl() -> None:
    # ratio 1 everywhere; ref logprobs: token 1 -> log 0.25 (kl = log 2), token 2 -> log 0.25
    # (kl = 0). mean kl = log(2)/2. A_t += coef·(mean - kl_t).
    batch = batch_of(TOKENS, [False, True, True], [NAN, NAN, NAN], [0.0, 1.0, 1.0])
    ref = torch.tensor([[math.log(0.25), math.log(0.25)]])
    coef = 0.5
    settings = LossSettings(kind="importance_sampling", kl_coef=coef)
    loss, stats = policy_loss(
        logits_from_probs(PROBS), batch, settings, normalizer=2, ref_logprobs=ref
    )
    mean_kl = math.log(2) / 2
    a1 = 1.0 + coef * (mean_kl - math.log(2))
    a2 = 1.0 + coef * (mean_kl - 0.0)
    assert loss.item() == pytest.approx(-(a1 + a2) / 2)
    assert stats.kl_sum == pytest.approx(math.log(2))
    merged = LossStats.merge([stats], kl_on=True)
    assert merged["loss/kl_policy_ref"] == pytest.approx(mean_kl)


def test_merged_stats_over_micro_batches() -> None:
    a = LossStats(
        loss=1.0, tokens=2, entropy_sum=2.0, ratios=torch.tensor([1.0, 2.0]), clipped=1, kl_sum=0.0
    )
    b = LossStats(
        loss=0.5, tokens=2, entropy_sum=4.0, ratios=torch.tensor([3.0, 4.0]), clipped=0, kl_sum=0.0
    )
    merged = LossStats.merge([a, b], kl_on=False)
    assert merged["loss/train"] == 1.5
    assert merged["loss/entropy"] == 1.5
    assert merged["loss/clipped_token_fraction"] == 0.25
    assert merged["loss/importance_ratio_mean"] == 2.5
    assert merged["loss/importance_ratio_max"] == 4.0
    # numpy-style linear interpolation: position 0.95·3 = 2.85 -> 3 + 0.85
    assert merged["loss/importance_ratio_p95"] == pytest.approx(3.85)
    assert "loss/kl_policy_ref" not in merged
