"""The per-token loss terms, in one place: the LocalBackend's policy loss and the Tinker
protocol server's losses both take them from here.

Every tensor is per position (the learner's logprob `new` of the token there, the sampler's
`old`, the `advantages`); the terms are left unsummed, so the LocalBackend can mask, weight
and normalise them and the Tinker server can sum them, as each one's callers expect:

    cross_entropy        -lp·w
    importance_sampling  -r·A
    ppo                  -min(r·A, clip(r, lo, hi)·A)
    cispo                -sg(clip(r, lo, hi))·lp·A
    dro                  -(lp·A - ½β(lp-q)²)

with lp = `new`, q = `old`, r = exp(lp-q) (the log-ratio clamped to ±20 so a far-off sampler
cannot overflow it) and [lo, hi] the clip interval of the ratio.
"""

from __future__ import annotations

import torch

LOG_RATIO_LIMIT = 20.0
RATIO_LOSSES = ("importance_sampling", "ppo", "cispo")


def importance_ratio(new: torch.Tensor, old: torch.Tensor) -> torch.Tensor:
    return torch.exp(torch.clamp(new - old, -LOG_RATIO_LIMIT, LOG_RATIO_LIMIT))


def ratio_terms(
    kind: str,
    new: torch.Tensor,
    old: torch.Tensor,
    advantages: torch.Tensor,
    low: float,
    high: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(the per-token terms of `kind`, one of RATIO_LOSSES, and the importance ratio)."""
    ratio = importance_ratio(new, old)
    if kind == "importance_sampling":
        return -ratio * advantages, ratio
    clipped = torch.clamp(ratio, low, high)
    if kind == "ppo":
        return -torch.minimum(ratio * advantages, clipped * advantages), ratio
    if kind == "cispo":
        return -clipped.detach() * advantages * new, ratio
    raise ValueError(f"no ratio loss named {kind!r}; one of {RATIO_LOSSES}")


def dro_terms(
    new: torch.Tensor, old: torch.Tensor, advantages: torch.Tensor, beta: float
) -> torch.Tensor:
    """Advantage-weighted logprobs held near the sampler by a quadratic penalty."""
    return -(new * advantages - 0.5 * beta * (new - old) ** 2)


def cross_entropy_terms(new: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    return -new * weights
