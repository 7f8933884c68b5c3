"""ART's `art.costs`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.accounting.pricing import MODEL_PRICING as MODEL_PRICING
    from arthex.accounting.pricing import CostCalculator as CostCalculator
    from arthex.accounting.pricing import ModelPricing as ModelPricing
    from arthex.accounting.pricing import TokenCount as TokenCount
    from arthex.accounting.pricing import build_cost_calculator as build_cost_calculator
    from arthex.accounting.pricing import compute_sample_costs as compute_sample_costs
    from arthex.accounting.pricing import compute_train_cost as compute_train_cost
    from arthex.accounting.pricing import get_model_pricing as get_model_pricing
    from arthex.accounting.pricing import tokens_to_cost as tokens_to_cost

    __all__ = [
        "MODEL_PRICING",
        "CostCalculator",
        "ModelPricing",
        "TokenCount",
        "build_cost_calculator",
        "compute_sample_costs",
        "compute_train_cost",
        "get_model_pricing",
        "tokens_to_cost",
    ]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
