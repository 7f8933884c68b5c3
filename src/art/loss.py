"""ART's `art.loss`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.adapters.local.art_loss import AlignedLossInputs as AlignedLossInputs
    from arthex.adapters.local.art_loss import Loss as Loss
    from arthex.adapters.local.art_loss import LossInputs as LossInputs
    from arthex.adapters.local.art_loss import (
        LossOffPolicyDiagnostics as LossOffPolicyDiagnostics,
    )
    from arthex.adapters.local.art_loss import (
        LossOffPolicyDiagnosticsAccumulator as LossOffPolicyDiagnosticsAccumulator,
    )
    from arthex.adapters.local.art_loss import PackedLossInput as PackedLossInput
    from arthex.adapters.local.art_loss import compute_probs_corr as compute_probs_corr
    from arthex.adapters.local.art_loss import histogram_quantile as histogram_quantile
    from arthex.adapters.local.art_loss import (
        importance_ratio_histogram_edges as importance_ratio_histogram_edges,
    )
    from arthex.adapters.local.art_loss import loss_fn as loss_fn
    from arthex.adapters.local.art_loss import shift_tensor as shift_tensor

    __all__ = [
        "AlignedLossInputs",
        "Loss",
        "LossInputs",
        "LossOffPolicyDiagnostics",
        "LossOffPolicyDiagnosticsAccumulator",
        "PackedLossInput",
        "compute_probs_corr",
        "histogram_quantile",
        "importance_ratio_histogram_edges",
        "loss_fn",
        "shift_tensor",
    ]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
