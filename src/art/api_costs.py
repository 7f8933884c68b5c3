"""ART's `art.api_costs`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.accounting.api_costs import ANTHROPIC_PROVIDER as ANTHROPIC_PROVIDER
    from arthex.accounting.api_costs import MODEL_TOKEN_PRICING as MODEL_TOKEN_PRICING
    from arthex.accounting.api_costs import OPENAI_PROVIDER as OPENAI_PROVIDER
    from arthex.accounting.api_costs import CostExtractor as CostExtractor
    from arthex.accounting.api_costs import ResponseGetter as ResponseGetter
    from arthex.accounting.api_costs import TokenPricing as TokenPricing
    from arthex.accounting.api_costs import extract_api_cost as extract_api_cost
    from arthex.accounting.api_costs import normalize_model_name as normalize_model_name
    from arthex.accounting.api_costs import normalize_provider as normalize_provider
    from arthex.accounting.builder import track_api_cost as track_api_cost

    __all__ = [
        "ANTHROPIC_PROVIDER",
        "MODEL_TOKEN_PRICING",
        "OPENAI_PROVIDER",
        "CostExtractor",
        "ResponseGetter",
        "TokenPricing",
        "extract_api_cost",
        "normalize_model_name",
        "normalize_provider",
        "track_api_cost",
    ]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
