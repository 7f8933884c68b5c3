"""The token-level policy loss: clipped importance sampling on the sampler's logprobs.

Position t of a row predicts token t+1, so every per-token tensor is used shifted by one:
the logits at [:, :-1] score the tokens at [:, 1:], and the completion mask, old logprobs,
advantages and weights are read at [:, 1:].
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import attrs
import torch

from ...core.config import CustomLoss, LossName, TrainConfig
from .packing import PackedBatch
from .token_losses import importance_ratio, ratio_terms


@attrs.frozen
class LossSettings:
    """What the loss needs from a TrainConfig; the clip interval is [1-clip_low, 1+clip_high]."""

    kind: LossName = "cispo"
    clip_low: float = 1.0
    clip_high: float = 4.0
    kl_coef: float = 0.0

    @classmethod
    def from_config(cls, config: TrainConfig) -> LossSettings:
        return cls(
            kind=config.loss_fn,
            clip_low=config.clip_low,
            clip_high=config.clip_high,
            kl_coef=config.kl_penalty_coef,
        )


@attrs.frozen
class LossStats:
    """Detached per-micro-batch numbers; `merge` them over an optimizer step."""

    loss: float
    tokens: int
    entropy_sum: float
    ratios: torch.Tensor
    clipped: int
    kl_sum: float

    @staticmethod
    def merge(parts: Sequence[LossStats], kl_on: bool) -> dict[str, float]:
        return LossStats.combine(parts).metrics(kl_on)

    @staticmethod
    def combine(parts: Sequence[LossStats]) -> LossStats:
        """One LossStats for several micro-batches (or several ranks): sums, and every ratio."""
        return LossStats(
            loss=sum(p.loss for p in parts),
            tokens=sum(p.tokens for p in parts),
            entropy_sum=sum(p.entropy_sum for p in parts),
            ratios=torch.cat([p.ratios for p in parts]) if parts else torch.zeros(0),
            clipped=sum(p.clipped for p in parts),
            kl_sum=sum(p.kl_sum for p in parts),
        )

    def metrics(self, kl_on: bool) -> dict[str, float]:
        """The optimizer step's loss metrics from its combined stats."""
        tokens = self.tokens
        metrics = {
            "loss/train": self.loss,
            "loss/entropy": self.entropy_sum / tokens if tokens else 0.0,
            "loss/clipped_token_fraction": self.clipped / tokens if tokens else 0.0,
            **_ratio_stats(self.ratios),
        }
        if kl_on:
            metrics["loss/kl_policy_ref"] = self.kl_sum / tokens if tokens else 0.0
        return metrics


def shifted_logprobs(
    logits: torch.Tensor, tokens: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(logprob of each next token, entropy of each predictive distribution), [rows, len-1].

    From the raw logits in float32: no temperature, the policy itself."""
    logp, new = next_token_logprobs(logits, tokens)
    entropy = -(logp.exp() * logp).sum(-1)
    return new, entropy


def next_token_logprobs(
    logits: torch.Tensor, tokens: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-softmax over the vocabulary, logprob of each next token), both shifted."""
    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    new = logp.gather(-1, tokens[:, 1:].unsqueeze(-1)).squeeze(-1)
    return logp, new


def _entropy_sum(logp: torch.Tensor, selected: torch.Tensor) -> float:
    """Σ entropy over the selected positions only, outside the graph: the metric needs no
    gradient, and full-vocabulary passes over prompt and padding positions (plus the
    tensors autograd would keep for them) are a large share of the loss's cost."""
    with torch.no_grad():
        chosen = logp[selected]
        return float(-(chosen.exp() * chosen).sum().item())


def policy_loss(
    logits: torch.Tensor,
    batch: PackedBatch,
    settings: LossSettings,
    *,
    normalizer: float,
    ref_logprobs: torch.Tensor | None = None,
) -> tuple[torch.Tensor, LossStats]:
    """`token_policy_loss` from a micro-batch's full logits [rows, len, vocab] (small
    vocabularies and hand-made cases; the trainer uses the chunked path, logprobs.py)."""
    logp, new = next_token_logprobs(logits, batch.tokens)
    entropy = _entropy_sum(logp, batch.mask[:, 1:])
    return token_policy_loss(
        new, entropy, batch, settings, normalizer=normalizer, ref_logprobs=ref_logprobs
    )


def token_policy_loss(
    new: torch.Tensor,
    entropy_sum: float,
    batch: PackedBatch,
    settings: LossSettings,
    *,
    normalizer: float,
    ref_logprobs: torch.Tensor | None = None,
) -> tuple[torch.Tensor, LossStats]:
    """The micro-batch's share of the optimizer step's loss: Σ(loss·weight·mask)/normalizer,
    where `normalizer` is the number of completion tokens in the whole optimizer step, so
    accumulating micro-batches gives the same gradient as one big batch.

    `new` [rows, len-1] holds the policy's logprob of each next token (shifted; only the
    completion positions are read), `entropy_sum` the entropy summed over those positions.
    `ref_logprobs` ([rows, len-1], shifted like the rest) turns on the KL penalty."""
    mask = batch.mask[:, 1:].to(new.dtype)
    old = batch.old_logprobs[:, 1:].to(new.dtype)
    advantages = batch.advantages[:, 1:].to(new.dtype)
    weights = batch.weights[:, 1:].to(new.dtype)
    selected = batch.mask[:, 1:]

    # Unknown sampling logprobs mean "ratio 1": compare the policy with itself.
    old = torch.where(torch.isnan(old), new.detach(), old)
    low, high = 1.0 - settings.clip_low, 1.0 + settings.clip_high
    advantages, kl_sum = kl_shaped(advantages, new, mask, ref_logprobs, settings.kl_coef)
    per_token, ratio = ratio_terms(settings.kind, new, old, advantages, low, high)
    loss = (per_token * weights * mask).sum() / max(normalizer, 1e-18)

    with torch.no_grad():
        clipped = int((_clip_acts(settings.kind, ratio, advantages, low, high) & selected).sum())
        stats = LossStats(
            loss=float(loss.item()),
            tokens=int(selected.sum().item()),
            entropy_sum=entropy_sum,
            ratios=ratio[selected].detach().float().cpu(),
            clipped=clipped,
            kl_sum=kl_sum,
        )
    return loss, stats


def _clip_acts(
    kind: LossName, ratio: torch.Tensor, advantages: torch.Tensor, low: float, high: float
) -> torch.Tensor:
    """Where the clip changes a token's term (ART's `loss/clipped_token_fraction`): CISPO
    clips every ratio outside [low, high]; PPO's minimum takes the clipped term only above
    the interval with a positive advantage or below it with a negative one; plain importance
    sampling never clips."""
    if kind == "importance_sampling":
        return torch.zeros_like(ratio, dtype=torch.bool)
    if kind == "ppo":
        return ((advantages > 0) & (ratio > high)) | ((advantages < 0) & (ratio < low))
    return (ratio < low) | (ratio > high)


def custom_token_loss(
    new: torch.Tensor,
    entropy_sum: float,
    batch: PackedBatch,
    loss_fn: CustomLoss,
    *,
    normalizer: float,
    ref_logprobs: torch.Tensor | None = None,
    kl_coef: float = 0.0,
) -> tuple[torch.Tensor, LossStats]:
    """A custom loss (core.config.CustomLoss) over the micro-batch, as Tinker's
    `forward_backward_custom` runs it: called once per row (one sequence) with its completion
    positions, and the terms summed, not normalised. `loss/train` still reports the loss per
    completion token of the optimizer step (`normalizer`), as the Tinker backend does. The
    advantages it sees are KL-shaped as the built-in losses' are."""
    selected = batch.mask[:, 1:]
    old = batch.old_logprobs[:, 1:].to(new.dtype)
    old = torch.where(torch.isnan(old), new.detach(), old)
    advantages, kl_sum = kl_shaped(
        batch.advantages[:, 1:].to(new.dtype),
        new,
        selected.to(new.dtype),
        ref_logprobs,
        kl_coef,
    )
    terms = [
        torch.as_tensor(loss_fn(new[row][keep], old[row][keep], advantages[row][keep])).reshape(())
        for row, keep in enumerate(selected)
        if bool(keep.any())
    ]
    loss = torch.stack(terms).sum() if terms else new.sum() * 0.0
    with torch.no_grad():
        ratio = importance_ratio(new, old)
        stats = LossStats(
            loss=float(loss.item()) / max(normalizer, 1e-18),
            tokens=int(selected.sum().item()),
            entropy_sum=entropy_sum,
            ratios=ratio[selected].detach().float().cpu(),
            clipped=0,
            kl_sum=kl_sum,
        )
    return loss, stats


def kl_shaped(
    advantages: torch.Tensor,
    new: torch.Tensor,
    mask: torch.Tensor,
    ref_logprobs: torch.Tensor | None,
    coef: float,
) -> tuple[torch.Tensor, float]:
    """(the advantages shaped by the KL to the reference, the KL summed over the mask)."""
    if ref_logprobs is None or coef <= 0:
        return advantages, 0.0
    kl = (new.detach() - ref_logprobs.to(new.dtype)) * mask
    count = mask.sum()
    mean_kl = kl.sum() / count if count > 0 else kl.sum()
    return advantages + coef * (mean_kl - kl) * mask, float(kl.sum().item())


def _ratio_stats(ratios: torch.Tensor) -> dict[str, float]:
    if ratios.numel() == 0:
        return {
            "loss/importance_ratio_mean": 1.0,
            "loss/importance_ratio_p95": 1.0,
            "loss/importance_ratio_p99": 1.0,
            "loss/importance_ratio_max": 1.0,
        }
    ordered = torch.sort(ratios.double()).values
    return {
        "loss/importance_ratio_mean": float(ordered.mean().item()),
        "loss/importance_ratio_p95": _quantile(ordered, 0.95),
        "loss/importance_ratio_p99": _quantile(ordered, 0.99),
        "loss/importance_ratio_max": float(ordered[-1].item()),
    }


def _quantile(ordered: torch.Tensor, q: float) -> float:
    """Linear interpolation between order statistics (numpy's default), on sorted values."""
    position = q * (ordered.numel() - 1)
    below = math.floor(position)
    above = min(below + 1, ordered.numel() - 1)
    fraction = position - below
    return float((ordered[below] * (1 - fraction) + ordered[above] * fraction).item())
