"""ART's `art.costs`: per-million-token prices and the cost metrics computed from them
(`costs/{context}/tinker_prefill`, `costs/{context}/tinker_sample`, a training cost).

Prices are dollars per million tokens. `MODEL_PRICING` is ART 0.5.23's price list for the
hosted models; a model not in it is priced by passing a `ModelPricing` of one's own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeAlias

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

_MILLION = 1_000_000


@dataclass(frozen=True)
class ModelPricing:
    """A model's prices in $ per million tokens: prompt (`prefill`), generated (`sample`)
    and trained-on (`train`) tokens."""

    prefill: float
    sample: float
    train: float


TokenCount: TypeAlias = int | None
CostCalculator: TypeAlias = Callable[[TokenCount, TokenCount, str], dict[str, float]]
"""(prompt tokens, completion tokens, cost context) -> cost metrics, `costs/...` keys."""


def _prices(prefill: float, sample: float, train: float) -> ModelPricing:
    return ModelPricing(prefill=prefill, sample=sample, train=train)


MODEL_PRICING: dict[str, ModelPricing] = {
    "Qwen/Qwen3.6-35B-A3B": _prices(0.36, 0.89, 1.07),
    "Qwen/Qwen3.6-27B": _prices(1.24, 3.73, 3.73),
    "Qwen/Qwen3.5-4B": _prices(0.22, 0.67, 0.67),
    "Qwen/Qwen3.5-27B": _prices(1.24, 3.73, 3.73),
    "Qwen/Qwen3.5-35B-A3B": _prices(0.36, 0.89, 1.07),
    "Qwen/Qwen3.5-397B-A17B": _prices(2.00, 5.00, 6.00),
    "Qwen/Qwen3.5-397B-A17B:peft:262144": _prices(4.00, 10.00, 12.00),
    "Qwen/Qwen3-4B-Instruct-2507": _prices(0.07, 0.22, 0.22),
    "Qwen/Qwen3-8B": _prices(0.13, 0.40, 0.40),
    "Qwen/Qwen3-8B-Base": _prices(0.13, 0.40, 0.40),
    "Qwen/Qwen3-30B-A3B": _prices(0.12, 0.30, 0.36),
    "Qwen/Qwen3-30B-A3B-Base": _prices(0.12, 0.30, 0.36),
    "Qwen/Qwen3-30B-A3B-Instruct-2507": _prices(0.12, 0.30, 0.36),
    "Qwen/Qwen3-32B": _prices(0.49, 1.47, 1.47),
    "Qwen/Qwen3-235B-A22B-Instruct-2507": _prices(0.68, 1.70, 2.04),
    "Qwen/Qwen3-VL-30B-A3B-Instruct": _prices(0.18, 0.44, 0.53),
    "Qwen/Qwen3-VL-235B-A22B-Instruct": _prices(1.02, 2.56, 3.07),
    "meta-llama/Llama-3.2-1B": _prices(0.03, 0.09, 0.09),
    "meta-llama/Llama-3.2-3B": _prices(0.06, 0.18, 0.18),
    "meta-llama/Llama-3.1-8B": _prices(0.13, 0.40, 0.40),
    "meta-llama/Llama-3.1-8B-Instruct": _prices(0.13, 0.40, 0.40),
    "meta-llama/Llama-3.1-70B": _prices(1.05, 3.16, 3.16),
    "meta-llama/Llama-3.3-70B-Instruct": _prices(1.05, 3.16, 3.16),
    "deepseek-ai/DeepSeek-V3.1": _prices(1.13, 2.81, 3.38),
    "deepseek-ai/DeepSeek-V3.1-Base": _prices(1.13, 2.81, 3.38),
    "openai/gpt-oss-120b": _prices(0.18, 0.44, 0.52),
    "openai/gpt-oss-120b:peft:131072": _prices(0.63, 1.54, 1.82),
    "openai/gpt-oss-20b": _prices(0.12, 0.30, 0.36),
    "moonshotai/Kimi-K2-Thinking": _prices(0.98, 2.44, 2.93),
    "moonshotai/Kimi-K2.5": _prices(1.47, 3.66, 4.40),
    "moonshotai/Kimi-K2.5:peft:131072": _prices(5.15, 12.81, 15.40),
    "moonshotai/Kimi-K2.6": _prices(1.47, 3.66, 4.40),
    "moonshotai/Kimi-K2.6:peft:131072": _prices(5.15, 12.81, 15.40),
    "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": _prices(0.13, 0.33, 0.40),
    "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16": _prices(0.38, 0.96, 1.16),
    "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16:peft:262144": _prices(0.76, 1.92, 2.32),
}


def get_model_pricing(model_name: str | None, *, strict: bool = False) -> ModelPricing | None:
    """The listed prices of `model_name`; None when it is not listed, or ValueError naming
    it (and the listed models) when `strict`."""
    if model_name is None:
        return None
    pricing = MODEL_PRICING.get(model_name)
    if pricing is None and strict:
        raise ValueError(
            f"No pricing configured for model '{model_name}': add a ModelPricing for it to "
            f"MODEL_PRICING (listed: {', '.join(MODEL_PRICING)})"
        )
    return pricing


def tokens_to_cost(num_tokens: float, price_per_million: float) -> float:
    """Dollars for `num_tokens` at `price_per_million`."""
    return float(num_tokens) * price_per_million / _MILLION


def compute_sample_costs(
    *,
    prompt_tokens: int | None,
    completion_tokens: int | None,
    cost_context: str,
    pricing: ModelPricing,
) -> dict[str, float]:
    """One inference call's cost metrics under `costs/{cost_context}/` (a missing count is
    zero tokens)."""
    context = cost_context.strip("/")
    if not context:
        raise ValueError("cost_context must be non-empty")
    return {
        f"costs/{context}/tinker_prefill": tokens_to_cost(prompt_tokens or 0, pricing.prefill),
        f"costs/{context}/tinker_sample": tokens_to_cost(completion_tokens or 0, pricing.sample),
    }


def build_cost_calculator(pricing: ModelPricing) -> CostCalculator:
    """A `CostCalculator` at `pricing`, for `TrainableModel.set_cost_calculator`."""

    def calculate(
        prompt_tokens: int | None, completion_tokens: int | None, cost_context: str
    ) -> dict[str, float]:
        return compute_sample_costs(
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cost_context=cost_context,
            pricing=pricing,
        )

    return calculate


def compute_train_cost(train_tokens: float, pricing: ModelPricing) -> float:
    """Dollars to train on `train_tokens` tokens."""
    return tokens_to_cost(train_tokens, pricing.train)
