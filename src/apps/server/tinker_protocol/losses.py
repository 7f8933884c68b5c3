"""The Tinker protocol's losses, per datum, and the checks on their inputs.

The per-token terms are the LocalBackend's (adapters/local/token_losses.py), which follow
Tinker's documented definitions: every tensor has one entry per input position, position i
predicts token i+1, and the terms are summed here, never averaged (normalisation is the
caller's, inside the advantages or weights):

    cross_entropy        -Σ lp·w
    importance_sampling  -Σ exp(lp-q)·A
    ppo                  -Σ min(r·A, clip(r, lo, hi)·A)
    cispo                -Σ sg(clip(r, lo, hi))·lp·A
    dro                  -Σ (lp·A - ½β(lp-q)²)

with lp the learner's logprob of the target, q the sampler's, r = exp(lp-q) and lo/hi the
`clip_low_threshold`/`clip_high_threshold` ratios (default 0.8/1.2).
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs
import torch

from ....adapters.local.token_losses import cross_entropy_terms, dro_terms, ratio_terms
from .errors import UserError

LOSSES = ("cross_entropy", "importance_sampling", "ppo", "cispo", "dro")
REQUIRED_INPUTS: dict[str, tuple[str, ...]] = {
    "cross_entropy": ("target_tokens", "weights"),
    "importance_sampling": ("target_tokens", "logprobs", "advantages"),
    "ppo": ("target_tokens", "logprobs", "advantages"),
    "cispo": ("target_tokens", "logprobs", "advantages"),
    "dro": ("target_tokens", "logprobs", "advantages"),
}


@attrs.frozen
class DatumIn:
    """One datum as the wire carries it: input tokens and named 1-D loss inputs."""

    tokens: list[int]
    inputs: dict[str, torch.Tensor]


def checked_inputs(
    index: int, datum: DatumIn, loss_fn: str, vocab_size: int
) -> dict[str, torch.Tensor]:
    n = len(datum.tokens)
    if n == 0:
        raise UserError(f"datum {index} has an empty model_input")
    for token in datum.tokens:
        if not 0 <= token < vocab_size:
            raise UserError(f"datum {index}: token {token} is outside the vocabulary")
    missing = [k for k in REQUIRED_INPUTS[loss_fn] if k not in datum.inputs]
    if missing:
        raise UserError(f"datum {index}: loss_fn {loss_fn!r} needs loss_fn_inputs {missing}")
    for key, value in datum.inputs.items():
        if value.ndim != 1 or value.shape[0] != n:
            raise UserError(
                f"datum {index}: loss_fn_inputs[{key!r}] has shape {list(value.shape)}, but "
                f"model_input has {n} tokens; every input needs exactly one entry per token"
            )
    targets = datum.inputs["target_tokens"]
    if bool(((targets < 0) | (targets >= vocab_size)).any()):
        raise UserError(f"datum {index}: a target token is outside the vocabulary")
    return datum.inputs


def datum_loss(
    loss_fn: str, lp: torch.Tensor, inputs: Mapping[str, torch.Tensor], config: Mapping[str, float]
) -> torch.Tensor:
    device = lp.device
    if loss_fn == "cross_entropy":
        return cross_entropy_terms(lp, inputs["weights"].float().to(device)).sum()
    q = inputs["logprobs"].float().to(device)
    advantages = inputs["advantages"].float().to(device)
    if loss_fn == "dro":
        if "beta" not in config:
            raise UserError("loss_fn 'dro' needs loss_fn_config {'beta': ...}")
        return dro_terms(lp, q, advantages, float(config["beta"])).sum()
    low = float(config.get("clip_low_threshold", 0.8))
    high = float(config.get("clip_high_threshold", 1.2))
    if not low <= high:
        raise UserError(f"clip_low_threshold {low} is above clip_high_threshold {high}")
    terms, _ratio = ratio_terms(loss_fn, lp, q, advantages, low, high)
    return terms.sum()
