"""The dollar cost of one call to a hosted model API (OpenAI or Anthropic), with ART's names
(`art.api_costs`; its decorator `track_api_cost` is in builder.py, beside the MetricsBuilder
it adds to).

A call's cost is, first found wins: a cost the response reports itself (`usage.cost`, or
LiteLLM's response-cost header); a cost extractor registered for the provider; otherwise its
token usage at the model's prices. Prices come from, first found: a MetricsBuilder's
`register_model_pricing`, `MODEL_TOKEN_PRICING`, LiteLLM's price list (when LiteLLM is
installed), `art.costs.MODEL_PRICING`; each price passed to the call overrides its field.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, ParamSpec, TypeVar

from .pricing import get_model_pricing, tokens_to_cost

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
]

OPENAI_PROVIDER = "openai"
ANTHROPIC_PROVIDER = "anthropic"

P = ParamSpec("P")
R = TypeVar("R")
CostExtractor = Callable[[Any], float | None]
ResponseGetter = Callable[[Any], Any]


@dataclass(frozen=True)
class TokenPricing:
    """A model API's prices in $ per million tokens. An unset cache price is the prompt
    price."""

    prompt_per_million: float
    completion_per_million: float
    cached_prompt_per_million: float | None = None
    cache_creation_per_million: float | None = None
    cache_read_per_million: float | None = None


MODEL_TOKEN_PRICING: dict[str, TokenPricing] = {
    "openai/gpt-4.1": TokenPricing(2.0, 8.0, cached_prompt_per_million=0.5),
    "anthropic/claude-sonnet-4-6": TokenPricing(
        3.0, 15.0, cache_creation_per_million=3.75, cache_read_per_million=0.30
    ),
}

_OVERRIDES = (
    "prompt_per_million",
    "completion_per_million",
    "cached_prompt_per_million",
    "cache_creation_per_million",
    "cache_read_per_million",
)


def normalize_provider(provider: str | None) -> str | None:
    """The provider's name trimmed and lower-cased; None when empty."""
    normalized = (provider or "").strip().lower()
    return normalized or None


def normalize_model_name(model_name: str | None) -> str | None:
    """The model name trimmed; None when empty."""
    normalized = (model_name or "").strip()
    return normalized or None


def _field(container: Any, name: str) -> Any:
    if container is None:
        return None
    if isinstance(container, Mapping):
        return container.get(name)
    return getattr(container, name, None)


def _number(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _cost_value(value: Any) -> float | None:
    number = _number(value)
    return number if number is not None else _number(_field(value, "total_cost"))


def _reported_cost(response: Any) -> float | None:
    usage = _field(response, "usage")
    for value in (
        _field(usage, "cost"),
        _field(_field(usage, "model_extra"), "cost"),
        _field(
            _field(_field(response, "_hidden_params"), "additional_headers"),
            "llm_provider-x-litellm-response-cost",
        ),
    ):
        cost = _cost_value(value)
        if cost is not None:
            return cost
    return None


def _count(usage: Any, *path: str) -> float | None:
    value = usage
    for name in path:
        value = _field(value, name)
    return None if value is None else float(value)


def _openai_cost(response: Any, pricing: TokenPricing) -> float | None:
    usage = _field(response, "usage")
    prompt = _count(usage, "prompt_tokens")
    completion = _count(usage, "completion_tokens")
    cached = _count(usage, "prompt_tokens_details", "cached_tokens") or 0.0
    if prompt is None and completion is None and cached == 0.0:
        return None
    prompt = prompt or 0.0
    cached = min(cached, prompt)
    cached_price = pricing.cached_prompt_per_million
    return (
        tokens_to_cost(max(prompt - cached, 0.0), pricing.prompt_per_million)
        + tokens_to_cost(
            cached, pricing.prompt_per_million if cached_price is None else cached_price
        )
        + tokens_to_cost(completion or 0.0, pricing.completion_per_million)
    )


def _anthropic_cost(response: Any, pricing: TokenPricing) -> float | None:
    usage = _field(response, "usage")
    given = _count(usage, "input_tokens"), _count(usage, "output_tokens")
    creation = _count(usage, "cache_creation_input_tokens") or 0.0
    read = _count(usage, "cache_read_input_tokens") or 0.0
    if given == (None, None) and creation == 0.0 and read == 0.0:
        return None
    prompt = pricing.prompt_per_million
    creation_price = pricing.cache_creation_per_million
    read_price = pricing.cache_read_per_million
    return (
        tokens_to_cost(given[0] or 0.0, prompt)
        + tokens_to_cost(creation, prompt if creation_price is None else creation_price)
        + tokens_to_cost(read, prompt if read_price is None else read_price)
        + tokens_to_cost(given[1] or 0.0, pricing.completion_per_million)
    )


def _litellm_pricing(model_name: str) -> TokenPricing | None:
    """LiteLLM's prices for the model, when LiteLLM is installed and knows it."""
    try:
        from litellm import get_model_info

        info = get_model_info(model_name)
    except Exception:  # not installed, or the model is unknown to it: no price from it
        return None
    if not isinstance(info, Mapping):
        return None

    def per_million(key: str) -> float | None:
        value = _number(info.get(key))
        return None if value is None else value * 1_000_000

    prompt = per_million("input_cost_per_token")
    completion = per_million("output_cost_per_token")
    if prompt is None or completion is None:
        return None
    read = per_million("cache_read_input_token_cost")
    return TokenPricing(
        prompt,
        completion,
        cached_prompt_per_million=read,
        cache_creation_per_million=per_million("cache_creation_input_token_cost"),
        cache_read_per_million=read,
    )


def _pricing(model_name: str, registered: Mapping[str, TokenPricing]) -> TokenPricing | None:
    found = registered.get(model_name) or MODEL_TOKEN_PRICING.get(model_name)
    if found is None:
        found = _litellm_pricing(model_name)
    if found is None and (listed := get_model_pricing(model_name)) is not None:
        found = TokenPricing(listed.prefill, listed.sample)
    return found


def extract_api_cost(
    response: Any,
    *,
    provider: str,
    model_name: str,
    prompt_price_per_million: float | None,
    completion_price_per_million: float | None,
    cached_prompt_price_per_million: float | None,
    cache_creation_price_per_million: float | None,
    cache_read_price_per_million: float | None,
    cost_extractors: Mapping[str, CostExtractor],
    model_pricing: Mapping[str, TokenPricing],
) -> float | None:
    """The dollar cost of the call that returned `response` (see the module's docstring).
    ValueError when the provider or model is empty, the model has no price, or the usage is
    not the provider's."""
    name = normalize_provider(provider)
    if name is None:
        raise ValueError("provider must be non-empty")
    reported = _reported_cost(response)
    if reported is not None:
        return reported
    extractor = cost_extractors.get(name)
    if extractor is not None and (custom := extractor(response)) is not None:
        return float(custom)
    model = normalize_model_name(model_name)
    if model is None:
        raise ValueError("model_name must be non-empty")
    pricing = _pricing(model, model_pricing)
    if pricing is None:
        raise ValueError(
            f"No pricing configured for model '{model}'. Register it with "
            "MetricsBuilder.register_model_pricing(), or add it to "
            "art.api_costs.MODEL_TOKEN_PRICING or art.costs.MODEL_PRICING"
        )
    given = (
        prompt_price_per_million,
        completion_price_per_million,
        cached_prompt_price_per_million,
        cache_creation_price_per_million,
        cache_read_price_per_million,
    )
    overrides = {f: float(v) for f, v in zip(_OVERRIDES, given, strict=True) if v is not None}
    pricing = replace(pricing, **overrides)
    if name == OPENAI_PROVIDER:
        cost = _openai_cost(response, pricing)
    elif name == ANTHROPIC_PROVIDER:
        cost = _anthropic_cost(response, pricing)
    else:
        raise ValueError(f"No cost extractor registered for provider '{name}'")
    if cost is None:
        raise ValueError(
            f"Response usage does not match provider '{name}'. Pass the right provider "
            "and model, or register a cost extractor for it"
        )
    return cost
