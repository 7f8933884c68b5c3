"""Cost accounting and step metrics, with ART 0.5.23's names and meaning (`art.costs`,
`art.api_costs`, `art.metrics`, `art.metrics_taxonomy` are these modules under `arthex.art`):
`pricing` (per-million-token prices, cost calculators), `api_costs` (a hosted API call's
cost), `builder` (`MetricsBuilder`, `track_api_cost`), `taxonomy` (a batch's data counts),
and `model_methods` (ART's cost and config methods on arthex's models). Costs reach the history
as `costs/...` metrics with their roll-ups and running totals (docs/costs.md)."""

from __future__ import annotations

from .api_costs import TokenPricing, extract_api_cost
from .builder import MetricsBuilder, track_api_cost
from .pricing import MODEL_PRICING, ModelPricing, build_cost_calculator, compute_train_cost

__all__ = [
    "MODEL_PRICING",
    "MetricsBuilder",
    "ModelPricing",
    "TokenPricing",
    "build_cost_calculator",
    "compute_train_cost",
    "extract_api_cost",
    "track_api_cost",
]
