"""ART's `group_aggregate` (`arthex.art.utils.group_aggregate`) on hand-computed cases: each
statistic per group of tokens, broadcast back or compact, with features, odd labels and
gradients."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    import torch

torch = pytest.importorskip("torch")

from arthex.art.utils.group_aggregate import Reduction, group_aggregate  # noqa: E402

VALUES = [[1.0, 2.0, 3.0, 4.0], [10.0, 20.0, 30.0, 40.0]]
GROUPS = [[0, 0, 1, 1], [0, 1, 1, 1]]
# per row, per group (0, 1), worked by hand; var is the population variance
COMPACT: dict[str, list[list[float]]] = {
    "sum": [[3.0, 7.0], [10.0, 90.0]],
    "mean": [[1.5, 3.5], [10.0, 30.0]],
    "var": [[0.25, 0.25], [0.0, 200.0 / 3.0]],
    "std": [[0.5, 0.5], [0.0, math.sqrt(200.0 / 3.0)]],
    "count": [[2.0, 2.0], [1.0, 3.0]],
    "min": [[1.0, 3.0], [10.0, 20.0]],
    "max": [[2.0, 4.0], [10.0, 40.0]],
}


def tensor(rows: object, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return torch.tensor(rows, dtype=dtype)


@pytest.mark.parametrize("reduce", list(COMPACT))
def test_each_statistic_per_group_compact_and_broadcast(reduce: Reduction) -> None:
    values, by = tensor(VALUES), tensor(GROUPS, torch.long)
    compact = group_aggregate(values, by=by, reduce=reduce, eps=0.0, broadcast=False)
    assert compact.shape == (2, 2)
    assert torch.allclose(compact, tensor(COMPACT[reduce]))
    spread = group_aggregate(values, by=by, reduce=reduce, eps=0.0)
    expected = [[COMPACT[reduce][b][g] for g in GROUPS[b]] for b in range(2)]
    assert torch.allclose(spread, tensor(expected))


def test_eps_is_in_the_divisions_as_in_art() -> None:
    values, by = tensor([[2.0, 4.0]]), tensor([[0, 0]], torch.long)
    assert group_aggregate(values, by=by, eps=1.0).tolist() == [[2.0, 2.0]]  # 6 / (2 + 1)
    std = group_aggregate(values, by=by, reduce="std", eps=0.5, broadcast=False)
    assert std.item() == pytest.approx(math.sqrt(max(20 / 2.5 - (6 / 2.5) ** 2, 0.0) + 0.5))


def test_labels_are_categories_across_the_batch_in_sorted_order() -> None:
    values = tensor([[1.0, 2.0], [3.0, 4.0]])
    by = tensor([[0.5, -7.0], [0.5, 0.5]])  # float labels; -7 is group 0, 0.5 group 1
    compact = group_aggregate(values, by=by, reduce="sum", broadcast=False)
    assert compact.tolist() == [[2.0, 1.0], [0.0, 7.0]]  # row 1 has no token of group 0
    extremes = group_aggregate(values, by=by, reduce="min", broadcast=False)
    assert extremes.tolist() == [[2.0, 1.0], [math.inf, 3.0]]
    assert group_aggregate(values, by=by, reduce="max", broadcast=False)[1, 0] == -math.inf


def test_feature_dimensions_are_kept_and_labels_may_carry_unit_dimensions() -> None:
    values = tensor([[[1.0, 10.0], [3.0, 30.0], [5.0, 50.0]]])  # [B=1, S=3, F=2]
    by = tensor([[[7], [7], [9]]], torch.long)  # [B, S, 1]
    expected = tensor([[[2.0, 20.0], [2.0, 20.0], [5.0, 50.0]]])
    assert torch.allclose(group_aggregate(values, by=by), expected)
    assert group_aggregate(values, by=by, broadcast=False).shape == (1, 2, 2)
    with pytest.raises(ValueError, match=r"one label per token"):
        group_aggregate(values, by=torch.zeros(1, 3, 2, dtype=torch.long))


def test_it_is_differentiable_in_the_values() -> None:
    values = tensor(VALUES).requires_grad_()
    group_aggregate(values, by=tensor(GROUPS, torch.long), reduce="mean", eps=0.0).sum().backward()  # type: ignore[no-untyped-call]
    assert values.grad is not None
    # each token's group mean is broadcast to every token of the group: a gradient of 1 each
    assert torch.allclose(values.grad, torch.ones_like(values))


def test_empty_values_and_bad_input() -> None:
    empty = torch.zeros(2, 0, 3)
    assert group_aggregate(empty, by=torch.zeros(2, 0)).shape == (2, 0, 3)
    assert group_aggregate(empty, by=torch.zeros(2, 0), broadcast=False).shape == (2, 0, 3)
    with pytest.raises(ValueError, match=r"at least 2 dimensions"):
        group_aggregate(torch.ones(3), by=torch.ones(3))
    with pytest.raises(ValueError, match=r"first two dimensions"):
        group_aggregate(torch.ones(2, 3), by=torch.ones(2, 4))
    with pytest.raises(ValueError, match=r"Unsupported reduce type: median"):
        group_aggregate(torch.ones(2, 3), by=torch.ones(2, 3), reduce="median")  # type: ignore[arg-type]
