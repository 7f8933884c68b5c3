"""arthex.art's cost and metric utilities (`art.costs`, `art.api_costs`, `art.metrics`,
`art.metrics_taxonomy`), on values worked by hand. ART's own code computes the same values in
tests/interop/test_art_frontend.py."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from arthex.art.api_costs import TokenPricing, extract_api_cost, track_api_cost
from arthex.art.costs import ModelPricing, build_cost_calculator, compute_train_cost
from arthex.art.metrics import MetricsBuilder, to_cumulative_metric_key
from arthex.art.metrics_taxonomy import average_metric_samples, summarize_trajectory_groups
from arthex.core.trajectories import Trajectory, TrajectoryGroup

PRICING = ModelPricing(prefill=0.5, sample=2.0, train=4.0)
NO_PRICES: dict[str, Any] = dict.fromkeys(
    (
        "prompt_price_per_million",
        "completion_price_per_million",
        "cached_prompt_price_per_million",
        "cache_creation_price_per_million",
        "cache_read_price_per_million",
    )
)


def test_a_cost_calculator_prices_prompt_and_completion_tokens() -> None:
    calculate = build_cost_calculator(PRICING)
    assert calculate(2_000_000, 500_000, "/train/") == {
        "costs/train/tinker_prefill": 1.0,  # 2M tokens at $0.5/M
        "costs/train/tinker_sample": 1.0,  # 0.5M tokens at $2/M
    }
    assert calculate(None, None, "eval") == {
        "costs/eval/tinker_prefill": 0.0,
        "costs/eval/tinker_sample": 0.0,
    }
    with pytest.raises(ValueError, match="cost_context"):
        calculate(1, 1, "/")
    assert compute_train_cost(250_000, PRICING) == 1.0


def test_api_costs_from_openai_and_anthropic_usage() -> None:
    openai = {
        "usage": {
            "prompt_tokens": 1_000,
            "completion_tokens": 100,
            "prompt_tokens_details": {"cached_tokens": 400},
        }
    }
    anthropic = {
        "usage": {
            "input_tokens": 1_000,
            "output_tokens": 100,
            "cache_creation_input_tokens": 200,
            "cache_read_input_tokens": 300,
        }
    }
    priced = {
        "m": TokenPricing(
            1.0,
            10.0,
            cached_prompt_per_million=0.1,
            cache_creation_per_million=2.0,
            cache_read_per_million=0.2,
        )
    }

    def cost(response: Any, provider: str, **given: Any) -> float | None:
        return extract_api_cost(
            response,
            provider=provider,
            model_name="m",
            **{**NO_PRICES, **given},
            cost_extractors={},
            model_pricing=priced,
        )

    # 600 uncached at $1/M + 400 cached at $0.1/M + 100 completion at $10/M
    assert cost(openai, "openai") == pytest.approx((600 + 40 + 1_000) / 1e6)
    # 1000 input at $1/M + 200 written at $2/M + 300 read at $0.2/M + 100 output at $10/M
    assert cost(anthropic, "Anthropic") == pytest.approx((1_000 + 400 + 60 + 1_000) / 1e6)
    assert cost(openai, "openai", completion_price_per_million=0.0) == pytest.approx(640 / 1e6)
    assert cost({"usage": {"cost": 0.5}}, "anything") == 0.5  # reported by the provider
    with pytest.raises(ValueError, match="does not match provider 'openai'"):
        cost(anthropic, "openai")
    with pytest.raises(ValueError, match="No cost extractor registered for provider 'acme'"):
        cost(openai, "acme")


def test_a_builder_rolls_costs_up_and_keeps_running_totals() -> None:
    builder = MetricsBuilder(cost_context="train")
    builder.add_cost("train/a", 1.0)
    builder.add_cost("train/b/c", 2.0)
    builder.add_cost("judge", 4.0)
    builder.add_metric("time/step_wall_s", 10.0)
    with pytest.raises(ValueError, match="ancestor"):
        builder.add_metric("costs/train/b", 1.0)
    with pytest.raises(ValueError, match="cumulative"):
        builder.add_metric("costs/cum/a", 1.0)
    first = asyncio.run(builder.flush())
    assert first["costs/train/b"] == 2.0 and first["costs/train"] == 3.0
    assert first["costs/all"] == 7.0 and first["time/cum/wall_s"] == 10.0
    builder.add_cost("train/a", 0.5)
    second = asyncio.run(builder.flush())
    assert second["costs/all"] == 0.5 and second["costs/cum/all"] == 7.5
    assert second["costs/cum/train/a"] == 1.5 and "costs/judge" not in second
    resumed = MetricsBuilder(cost_context="train")
    resumed.load_state_dict(builder.state_dict())
    resumed.add_cost("judge", 1.0)
    assert asyncio.run(resumed.flush())["costs/cum/judge"] == 5.0
    assert to_cumulative_metric_key("data/step_num_scenarios") == "data/cum/num_scenarios"


def test_track_api_cost_adds_to_the_active_builder_only() -> None:
    builder = MetricsBuilder(cost_context="eval")
    builder.register_model_pricing("m", prompt_per_million=1.0, completion_per_million=1.0)

    @track_api_cost(source="judge", provider="openai", model_name="m")
    async def judge() -> dict[str, Any]:
        return {"usage": {"prompt_tokens": 3_000_000, "completion_tokens": 1_000_000}}

    asyncio.run(judge())  # no active builder: nothing recorded, nothing raised

    async def inside() -> dict[str, float]:
        with builder.activate_context():
            await judge()
        return await builder.flush()

    assert asyncio.run(inside())["costs/eval/judge"] == 4.0
    with pytest.raises(ValueError, match="source"):
        track_api_cost(source="/", provider="openai", model_name="m")


def test_a_batch_summary_counts_groups_rollouts_and_scenarios() -> None:
    groups = [
        TrajectoryGroup(
            trajectories=[Trajectory(reward=0.0), Trajectory(reward=1.0)],
            metadata={"scenario_id": "s"},
        ),
        TrajectoryGroup(trajectories=[Trajectory(reward=1.0, metadata={"scenario_id": "s"})]),
    ]
    summary = summarize_trajectory_groups(groups)
    assert (summary.num_trajectories, summary.num_groups_trainable) == (3, 1)
    assert summary.scenario_ids == ["s"]
    assert average_metric_samples([{"a": 1.0}, {"a": 2.0, "b": 4.0}]) == {"a": 1.5, "b": 4.0}
