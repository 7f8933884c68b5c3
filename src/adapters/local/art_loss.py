"""ART's `art.loss` names on arthex's policy loss: the per-token terms come from
`token_losses.ratio_terms` and the KL shaping from `loss.kl_shaped`, the LocalBackend
trainer's own; this module only reads ART's inputs and reduces the way ART's `loss_fn` does.

ART's tensors are [rows, len]. `LossInputs` holds them unshifted (position t describes token
t) and `align_inputs` moves each one left by one, as arthex's trainer reads [:, 1:], so that
position t pairs with the policy's logprob of token t+1 (`new_logprobs`, already aligned).

ART's off-policy diagnostics are here too: `loss_fn` returns, with the loss, each call's
importance-ratio sums and a histogram of the ratios over 257 log-spaced edges (1e-4 to 1e4),
which `LossOffPolicyDiagnosticsAccumulator` adds up over micro-batches (and ranks) and turns
into ART's `loss/importance_ratio_*` metrics, the quantiles read off the histogram.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Literal

import attrs
import torch

from ...core.errors import InvalidInputError
from .loss import kl_shaped
from .token_losses import ratio_terms

Reduction = Literal["mean", "sum"]

# ART's packed tensors by name ([rows, len] each); ART spells the type only for type checkers
PackedLossInput = Mapping[str, torch.Tensor]

# ART's ratio histogram: 257 edges, 32 a decade from 1e-4 to 1e4, so 258 buckets (the first
# holds ratios <= 1e-4, the last those above 1e4)
_EDGES = (-4.0, 4.0, 257)

# ART's experimental_config keys that change its loss in ways arthex's loss has no term for.
_NOT_IN_ARTHEX = {
    "max_negative_advantage_importance_sampling_weight": "an upper bound on the ratio",
    "mask_prob_ratio": "zeroing ratios outside the clip interval",
    "kimi_k2_tau": "Kimi K2's advantage shift",
    "truncated_importance_sampling": "truncated importance sampling",
}


def shift_tensor(tensor: torch.Tensor, pad: float | bool) -> torch.Tensor:
    """`tensor` [rows, len] moved left by one position, the last position set to `pad`."""
    if tensor.dim() != 2:
        raise InvalidInputError(
            f"shift_tensor needs a [rows, len] tensor, got {tuple(tensor.shape)}"
        )
    return torch.nn.functional.pad(tensor[:, 1:], (0, 1), value=pad)


@attrs.define(kw_only=True)
class AlignedLossInputs:
    """ART's per-token loss inputs, aligned with the policy's next-token logprobs."""

    assistant_mask: torch.Tensor
    old_logprobs: torch.Tensor
    advantages: torch.Tensor
    weights: torch.Tensor
    group_ids: torch.Tensor
    original_logprobs: torch.Tensor | None = None
    entropies_are_aligned: bool = False

    def align_inputs(self) -> AlignedLossInputs:
        return self

    def masked_mean(self, values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Σ values / Σ mask (`values` already masked), as ART's reductions divide."""
        return values.sum() / (mask.sum() + 1e-18)

    def denominator(self, mask: torch.Tensor, reduction: Reduction) -> torch.Tensor | float:
        """What the summed loss is divided by: the trained token count ("mean") or 1 ("sum")."""
        if reduction == "sum":
            return 1.0
        return mask.sum() + 1e-18

    def aligned_entropies(self, entropies: torch.Tensor | None) -> torch.Tensor | None:
        """`entropies` shifted like the other inputs, unless they already are."""
        if entropies is None or self.entropies_are_aligned:
            return entropies
        return shift_tensor(entropies, 0.0)


@attrs.define(kw_only=True)
class LossInputs:
    """ART's packed tensors, unshifted: a mapping with `assistant_mask`, `logprobs`,
    `advantages`, `weights`, `group_ids` and optionally `original_logprobs`, each [rows, len]."""

    inputs: PackedLossInput

    def align_inputs(self) -> AlignedLossInputs:
        missing = [
            key
            for key in ("assistant_mask", "logprobs", "advantages", "weights", "group_ids")
            if key not in self.inputs
        ]
        if missing:
            raise InvalidInputError(f"LossInputs.inputs lacks {', '.join(missing)}")
        inputs = self.inputs
        original = inputs.get("original_logprobs")
        return AlignedLossInputs(
            assistant_mask=shift_tensor(inputs["assistant_mask"], False),
            old_logprobs=shift_tensor(inputs["logprobs"], math.nan),
            advantages=shift_tensor(inputs["advantages"], 0.0),
            weights=shift_tensor(inputs["weights"], 0.0),
            group_ids=shift_tensor(inputs["group_ids"], 0),
            original_logprobs=None if original is None else shift_tensor(original, 0.0),
        )


def importance_ratio_histogram_edges(*, device: torch.device | str | None) -> torch.Tensor:
    """The 257 float32 edges of ART's ratio histogram, 1e-4 to 1e4 evenly in log10."""
    low, high, count = _EDGES
    return torch.logspace(low, high, steps=count, device=device, dtype=torch.float32)


def histogram_quantile(
    histogram: torch.Tensor, edges: torch.Tensor, quantile: float
) -> torch.Tensor:
    """The `quantile` of the values counted in `histogram` (bucket i holding the values in
    (edges[i-1], edges[i]], so len(edges) + 1 buckets), interpolated linearly inside the bucket
    the quantile falls in; the first bucket spans [0, edges[0]], and buckets past the edges end
    at edges[-1]. 0 for an empty histogram."""
    if histogram.dim() != 1 or edges.dim() != 1 or edges.numel() == 0:
        raise InvalidInputError(
            f"histogram_quantile needs 1-d bucket counts and edges, got shapes "
            f"{tuple(histogram.shape)} and {tuple(edges.shape)}"
        )
    if not 0.0 <= quantile <= 1.0:
        raise InvalidInputError(f"quantile must be within [0, 1], got {quantile!r}")
    total = histogram.sum()
    if total <= 0:
        return histogram.new_zeros(())
    running = histogram.cumsum(0)
    wanted = total * quantile
    # the first bucket whose running count reaches the wanted count
    index = int(torch.searchsorted(running, wanted).clamp(max=histogram.numel() - 1))
    before = running[index - 1] if index > 0 else running.new_zeros(())
    inside = histogram[index].clamp_min(1.0)
    floor = edges[min(index - 1, edges.numel() - 1)] if index > 0 else edges.new_zeros(())
    ceiling = edges[min(index, edges.numel() - 1)]
    share = ((wanted - before) / inside).clamp(0.0, 1.0)
    return floor + (ceiling - floor) * share


_A_TENSOR = attrs.validators.instance_of(torch.Tensor)


@attrs.frozen(kw_only=True)
class LossOffPolicyDiagnostics:
    """One loss call's importance-ratio tallies over its trained tokens (assistant tokens with a
    non-zero weight): the ratios' sum, how many the clip acted on, how many tokens, and the
    ratios' histogram over `importance_ratio_histogram_edges`; float32 tensors."""

    ratio_sum: torch.Tensor = attrs.field(validator=_A_TENSOR)
    clipped_count: torch.Tensor = attrs.field(validator=_A_TENSOR)
    token_count: torch.Tensor = attrs.field(validator=_A_TENSOR)
    ratio_histogram: torch.Tensor = attrs.field(validator=_A_TENSOR)

    @classmethod
    def from_tensors(
        cls,
        *,
        prob_ratio: torch.Tensor,
        advantages: torch.Tensor,
        assistant_mask: torch.Tensor,
        weights: torch.Tensor,
        ppo: bool,
        epsilon: float,
        epsilon_high: float,
    ) -> LossOffPolicyDiagnostics:
        """The tallies of `prob_ratio` (the ratio before any clipping) where `assistant_mask`
        is set and `weights` is not 0. A token counts as clipped when its ratio is outside
        [1-epsilon, 1+epsilon_high]; under PPO only when the clip acts on it (above the
        interval with a positive advantage, below it with a negative one)."""
        trained = (assistant_mask > 0) & (weights != 0)
        ratios = prob_ratio.detach()[trained].float()
        edges = importance_ratio_histogram_edges(device=prob_ratio.device)
        low, high = 1.0 - epsilon, 1.0 + epsilon_high
        if ppo:
            signs = advantages.detach()[trained]
            acted = ((signs > 0) & (ratios > high)) | ((signs < 0) & (ratios < low))
        else:
            acted = (ratios < low) | (ratios > high)
        buckets = torch.bucketize(ratios, edges)
        return cls(
            ratio_sum=ratios.sum(),
            clipped_count=acted.float().sum(),
            token_count=ratios.new_tensor(float(ratios.numel())),
            ratio_histogram=torch.bincount(buckets, minlength=edges.numel() + 1).float(),
        )


@attrs.define(kw_only=True)
class LossOffPolicyDiagnosticsAccumulator:
    """Sums `LossOffPolicyDiagnostics` over an optimizer step's loss calls; `to_metrics` gives
    ART's step metrics (with `group`, summed over that torch.distributed group first)."""

    ratio_sum: torch.Tensor | None = None
    clipped_count: torch.Tensor | None = None
    token_count: torch.Tensor | None = None
    ratio_histogram: torch.Tensor | None = None

    def add(self, diagnostics: LossOffPolicyDiagnostics | None) -> None:
        """Add one call's tallies (None, a call without diagnostics, adds nothing)."""
        if diagnostics is None:
            return
        for name in ("ratio_sum", "clipped_count", "token_count", "ratio_histogram"):
            part = getattr(diagnostics, name).detach()
            so_far = getattr(self, name)
            setattr(self, name, part if so_far is None else so_far + part)

    def to_metrics(self, *, group: object | None = None) -> dict[str, float]:
        """`loss/importance_ratio_mean`, `_p95`, `_p99` and `loss/clipped_token_fraction`;
        {} before anything was added."""
        if (
            self.ratio_sum is None
            or self.clipped_count is None
            or self.token_count is None
            or self.ratio_histogram is None
        ):
            return {}
        totals = torch.cat(
            [
                self.ratio_sum.reshape(1),
                self.clipped_count.reshape(1),
                self.token_count.reshape(1),
                self.ratio_histogram,
            ]
        )
        if group is not None:
            torch.distributed.all_reduce(totals, group=group)
        tokens = totals[2].clamp_min(1.0)
        histogram = totals[3:]
        edges = importance_ratio_histogram_edges(device=totals.device)
        return {
            "loss/importance_ratio_mean": float(totals[0] / tokens),
            "loss/importance_ratio_p95": float(histogram_quantile(histogram, edges, 0.95)),
            "loss/importance_ratio_p99": float(histogram_quantile(histogram, edges, 0.99)),
            "loss/clipped_token_fraction": float(totals[1] / tokens),
        }


@attrs.frozen(kw_only=True)
class Loss:
    """What `loss_fn` returns, with the call's importance-ratio tallies in
    `offpolicy_diagnostics` (None only when built by hand)."""

    reduction: Reduction
    policy_loss: torch.Tensor
    entropy: torch.Tensor | None
    policy_loss_sum: torch.Tensor
    probs_corr: torch.Tensor
    kl_policy_ref: torch.Tensor | None = None
    offpolicy_diagnostics: LossOffPolicyDiagnostics | None = None


def compute_probs_corr(old_logprobs: torch.Tensor, new_logprobs: torch.Tensor) -> torch.Tensor:
    """Pearson correlation of the sampler's and the policy's token probabilities over the
    positions where both logprobs are finite; 0 with fewer than two or with no spread."""
    finite = torch.isfinite(old_logprobs) & torch.isfinite(new_logprobs)
    old = old_logprobs[finite].double().exp()
    new = new_logprobs[finite].double().exp()
    zero = new_logprobs.new_zeros(())
    if old.numel() < 2:
        return zero
    old_centred, new_centred = old - old.mean(), new - new.mean()
    old_spread = old_centred.pow(2).mean().sqrt()
    new_spread = new_centred.pow(2).mean().sqrt()
    if not (math.isfinite(old_spread.item()) and math.isfinite(new_spread.item())):
        return zero
    if old_spread.item() == 0.0 or new_spread.item() == 0.0:
        return zero
    corr = (old_centred * new_centred).mean() / (old_spread * new_spread)
    return corr.to(new_logprobs.dtype)


def _settings(config: Mapping[str, object]) -> tuple[str, float, float, float]:
    """(arthex's loss name, clip low, clip high, KL coefficient) from ART's experimental_config."""
    for key, what in _NOT_IN_ARTHEX.items():
        if config.get(key):
            raise InvalidInputError(
                f"experimental_config[{key!r}] ({what}) is not in arthex's loss; drop it"
            )
    level = config.get("importance_sampling_level", "token")
    if level != "token":
        raise InvalidInputError(
            f"experimental_config['importance_sampling_level']={level!r} is not in arthex's "
            "loss: arthex weighs each token by its own ratio ('token')"
        )
    source = config.get("kl_penalty_source", "current_learner")
    if source != "current_learner":
        raise InvalidInputError(
            f"experimental_config['kl_penalty_source']={source!r} is not supported (only "
            "'current_learner'): arthex's KL penalty compares the current policy with the reference"
        )
    ppo = bool(config.get("ppo", False))
    epsilon = _number(config, "epsilon", 0.2 if ppo else 1.0)
    high = config.get("epsilon_high", None if ppo else 4.0)
    epsilon_high = epsilon if high is None else _number({"epsilon_high": high}, "epsilon_high")
    coef = _number(config, "kl_penalty_coef", 0.0)
    return ("ppo" if ppo else "cispo"), epsilon, epsilon_high, coef


def _number(config: Mapping[str, object], key: str, default: float = 0.0) -> float:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInputError(f"experimental_config[{key!r}] must be a number, got {value!r}")
    return float(value)


def loss_fn(
    inputs: LossInputs | AlignedLossInputs,
    new_logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor | None,
    entropies: torch.Tensor | None,
    experimental_config: Mapping[str, object],
    reduction: Reduction = "mean",
) -> Loss:
    """ART's `loss_fn` on arthex's loss: CISPO (the default) or PPO with `experimental_config
    ["ppo"]`, clip interval [1-epsilon, 1+epsilon_high], advantages shaped by the KL to the
    reference when `kl_penalty_coef` > 0; the terms weighted, masked, summed and divided by the
    trained token count ("mean") or not ("sum")."""
    if reduction not in ("mean", "sum"):
        raise InvalidInputError(f"reduction must be 'mean' or 'sum', got {reduction!r}")
    kind, epsilon, epsilon_high, kl_coef = _settings(experimental_config)
    aligned = inputs.align_inputs()
    if new_logprobs.shape != aligned.assistant_mask.shape:
        raise InvalidInputError(
            f"new_logprobs has shape {tuple(new_logprobs.shape)}, the inputs "
            f"{tuple(aligned.assistant_mask.shape)}"
        )
    if new_logprobs.dtype == torch.float16:
        new_logprobs = new_logprobs.float()  # arthex's trainer scores tokens in float32
    selected = aligned.assistant_mask.to(torch.bool)
    zero = new_logprobs.new_zeros(())
    new = torch.where(selected, new_logprobs, zero)
    old = torch.where(selected, aligned.old_logprobs.to(new.dtype), zero)
    mask = selected.to(new.dtype)
    weights = aligned.weights.to(new.dtype)
    probs_corr = compute_probs_corr(torch.where(selected, old, math.nan), new)
    # Unknown (NaN or infinite) sampling logprobs: the token was sampled by this policy.
    old = torch.where(torch.isfinite(old), old, new.detach())
    ref = None if ref_logprobs is None else torch.where(selected, ref_logprobs.to(new.dtype), zero)
    advantages, kl_sum = kl_shaped(aligned.advantages.to(new.dtype), new, mask, ref, kl_coef)
    per_token, ratio = ratio_terms(kind, new, old, advantages, 1.0 - epsilon, 1.0 + epsilon_high)
    diagnostics = LossOffPolicyDiagnostics.from_tensors(
        prob_ratio=ratio,
        advantages=advantages,
        assistant_mask=mask,
        weights=weights,
        ppo=kind == "ppo",
        epsilon=epsilon,
        epsilon_high=epsilon_high,
    )
    weighted = per_token * weights * mask
    denominator = aligned.denominator(mask, reduction)
    entropy = None
    aligned_entropies = aligned.aligned_entropies(entropies)
    if aligned_entropies is not None:
        kept = torch.where(selected, aligned_entropies.to(new.dtype), zero)
        entropy = (kept * weights * mask).sum() / denominator
    kl_policy_ref = None
    if ref is not None and kl_coef > 0:
        kl_policy_ref = new.new_tensor(kl_sum) / (mask.sum() + 1e-18)
    return Loss(
        reduction=reduction,
        policy_loss=weighted.sum() / denominator,
        entropy=entropy,
        policy_loss_sum=weighted.sum(),
        probs_corr=probs_corr,
        kl_policy_ref=kl_policy_ref,
        offpolicy_diagnostics=diagnostics,
    )
