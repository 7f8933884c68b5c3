"""ART's `group_aggregate` (`art.utils.group_aggregate`): a statistic of each group of tokens,
groups named by a label tensor, computed with scatter-adds so it stays differentiable in the
values. Needs torch (the `local` extra).

`values` is [B, S, *F]; `by` labels each of the B x S tokens (any dtype `torch.unique` takes;
only equality matters, and one label is one group across the whole batch). Groups are numbered
in the order of their sorted labels. `broadcast=True` gives each token its group's statistic
(the shape of `values`); `broadcast=False` gives [B, groups, *F], where a group with no token
in a row has sum and count 0, mean 0, min +inf and max -inf there. Mean, variance and standard
deviation divide by `count + eps`; variance is E[x^2] - E[x]^2 clamped at 0; standard deviation
is sqrt(variance + eps) (ART's definitions, so the numbers are ART's).
"""

from __future__ import annotations

from typing import Literal, get_args

import torch

__all__ = ["Reduction", "group_aggregate"]

Reduction = Literal["sum", "mean", "var", "std", "count", "min", "max"]
_REDUCTIONS: tuple[str, ...] = get_args(Reduction)


def _labels(by: torch.Tensor, batch: int, sequence: int) -> torch.Tensor:
    """`by` as [B, S] group numbers 0..K-1 (trailing size-1 dimensions dropped)."""
    if by.dim() > 2 and any(size != 1 for size in by.shape[2:]):
        raise ValueError(
            f"`by` must be [B, S] or [B, S, 1, ...] (one label per token), got {tuple(by.shape)}"
        )
    numbers: torch.Tensor = torch.unique(by.reshape(-1), sorted=True, return_inverse=True)[1]
    return numbers.reshape(batch, sequence)


def group_aggregate(
    values: torch.Tensor,
    *,
    by: torch.Tensor,
    reduce: Reduction = "mean",
    eps: float = 1e-8,
    broadcast: bool = True,
) -> torch.Tensor:
    """The `reduce` statistic of `values` over each group of tokens sharing a label in `by`."""
    if values.dim() < 2:
        raise ValueError("`values` must have at least 2 dimensions [B, S].")
    if by.shape[:2] != values.shape[:2]:
        raise ValueError("`by` must match the first two dimensions of `values` (B, S).")
    if reduce not in _REDUCTIONS:
        raise ValueError(f"Unsupported reduce type: {reduce}")
    batch, sequence, *features = values.shape
    if values.numel() == 0:
        if broadcast:
            return values.clone()
        return values.new_empty((batch, 0, *features))
    if by.numel() == 0:
        raise ValueError("`by` cannot be empty when values is non-empty")

    groups = _labels(by, batch, sequence)
    count_of_groups = int(groups.max().item()) + 1
    flat = values.reshape(batch, sequence, -1)  # [B, S, P]: the features as one axis
    index = groups.unsqueeze(-1).expand_as(flat)
    shape = (batch, count_of_groups, flat.shape[-1])

    def scatter_sum(source: torch.Tensor) -> torch.Tensor:
        return flat.new_zeros(shape).scatter_add(1, index, source)

    result: torch.Tensor
    if reduce in ("min", "max"):
        start = float("inf") if reduce == "min" else float("-inf")
        result = torch.full(shape, start, dtype=flat.dtype, device=flat.device).scatter_reduce(
            1, index, flat, reduce="amin" if reduce == "min" else "amax"
        )
    else:
        total = scatter_sum(flat)
        count = scatter_sum(torch.ones_like(flat))
        if reduce == "sum":
            result = total
        elif reduce == "count":
            result = count
        else:
            mean = total / (count + eps)
            if reduce == "mean":
                result = mean
            else:
                variance = (scatter_sum(flat * flat) / (count + eps) - mean * mean).clamp(min=0.0)
                result = variance if reduce == "var" else torch.sqrt(variance + eps)
    if broadcast:
        return result.gather(1, index).reshape(values.shape)
    return result.reshape(batch, count_of_groups, *features)
