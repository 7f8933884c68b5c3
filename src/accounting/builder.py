"""arthex's step metrics builder, with ART's names (`art.metrics`): `MetricsBuilder`, which
gathers one step's cost, time and data metrics and, at `flush`, adds ART's roll-ups and
running totals.

At a flush, for the step's `costs/...` leaves: each parent path gets the sum of the leaves
below it (`costs/train` = `costs/train/a` + `costs/train/b/c`, ...) and `costs/all` the sum
of the top-level ones; then every `costs/`, `time/` and `data/` key gets its running total
under `{section}/cum/{rest}` (`time/step_wall_s` -> `time/cum/wall_s`). Builders made with
`for_cost_context` share the running totals and each keeps its own step buffer.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from typing import Any, Literal, ParamSpec, TypeVar, cast

import pydantic

from .api_costs import (
    CostExtractor,
    ResponseGetter,
    TokenPricing,
    extract_api_cost,
    normalize_model_name,
    normalize_provider,
)

__all__ = [
    "MetricDefinition",
    "MetricsBuilder",
    "is_builder_managed_metric",
    "is_cumulative_metric_key",
    "to_cumulative_metric_key",
    "track_api_cost",
]

P = ParamSpec("P")
R = TypeVar("R")

_active: ContextVar[MetricsBuilder] = ContextVar("arthex_active_metrics_builder")
_TOTALLED = ("costs", "time", "data")
_RATIO = "data/step_unused_and_dummy_ratio"


class MetricDefinition(pydantic.BaseModel):
    """What a metric key means, for dashboards: its title, kind, unit and direction."""

    key: str
    title: str
    description: str
    kind: Literal["counter", "duration", "gauge", "rate", "ratio", "score"]
    unit: str | None = None
    higher_is_better: bool | None = None
    dashboard_default: bool = False
    score_component: bool = False


def is_cumulative_metric_key(key: str) -> bool:
    """Whether `key` is a running total (`section/cum/...`)."""
    parts = key.split("/", 2)
    return len(parts) >= 2 and parts[1] == "cum"


def is_builder_managed_metric(key: str) -> bool:
    """Whether a logged metric goes through the builder (costs, step times, step data)."""
    return key.startswith(("costs/", "time/step_", "data/step_"))


def to_cumulative_metric_key(key: str) -> str:
    """The running-total key of a step key; ValueError for one that is already a total."""
    if is_cumulative_metric_key(key):
        raise ValueError(f"Metric key '{key}' is already cumulative.")
    section, rest = key.split("/", 1)
    return f"{section}/cum/{rest.removeprefix('step_')}"


@dataclass
class _Buffer:
    values: dict[str, float] = field(default_factory=dict)
    scenario_ids: set[str] = field(default_factory=set)


@dataclass
class _Shared:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    buffers: dict[str, _Buffer] = field(default_factory=dict)
    totals: dict[str, float] = field(default_factory=dict)
    scenario_ids: set[str] = field(default_factory=set)
    extractors: dict[str, CostExtractor] = field(default_factory=dict)
    pricing: dict[str, TokenPricing] = field(default_factory=dict)


class MetricsBuilder:
    """One cost context's step metrics (`cost_context`: where API costs land, `costs/{it}/`)."""

    def __init__(
        self,
        cost_context: str,
        *,
        _shared_state: _Shared | None = None,
        _buffer_scope: str | None = None,
    ) -> None:
        if not cost_context:
            raise ValueError("cost_context must be non-empty")
        self.cost_context = cost_context
        self._scope = cost_context if _buffer_scope is None else _buffer_scope
        self._shared = _Shared() if _shared_state is None else _shared_state

    # -- adding ---------------------------------------------------------------------------------

    def add_cost(self, path: str, usd: float) -> None:
        """Add `usd` dollars to `costs/{path}` for this step."""
        if not path:
            raise ValueError("Cost path must be non-empty")
        self.add_metric(f"costs/{path}", float(usd))

    def add_response_cost(
        self,
        source: str,
        response: Any,
        *,
        provider: str,
        model_name: str,
        prompt_price_per_million: float | None = None,
        completion_price_per_million: float | None = None,
        cached_prompt_price_per_million: float | None = None,
        cache_creation_price_per_million: float | None = None,
        cache_read_price_per_million: float | None = None,
    ) -> float | None:
        """Add the cost of one API response under `costs/{cost_context}/{source}`; returns it."""
        where = source.strip("/")
        if not where:
            raise ValueError("source must be non-empty")
        cost = extract_api_cost(
            response,
            provider=provider,
            model_name=model_name,
            prompt_price_per_million=prompt_price_per_million,
            completion_price_per_million=completion_price_per_million,
            cached_prompt_price_per_million=cached_prompt_price_per_million,
            cache_creation_price_per_million=cache_creation_price_per_million,
            cache_read_price_per_million=cache_read_price_per_million,
            cost_extractors=self._shared.extractors,
            model_pricing=self._shared.pricing,
        )
        if cost is not None:
            self.add_cost(f"{self.cost_context}/{where}", cost)
        return cost

    def add_metric(self, key: str, value: float) -> None:
        """Add `value` to `key` (`section/...`) for this step. A running-total key, or a key
        that is a leaf's ancestor or descendant in this step, is a ValueError."""
        if "/" not in key:
            raise ValueError("Metric key must include a section prefix")
        if is_cumulative_metric_key(key):
            raise ValueError(f"Metric key '{key}' uses the reserved cumulative namespace.")
        values = self._buffer().values
        for other in values:
            if other.startswith(f"{key}/"):
                raise ValueError(f"Cannot log '{key}' as a leaf: it is an ancestor of '{other}'.")
            if key.startswith(f"{other}/"):
                raise ValueError(
                    f"Cannot log '{key}' as a leaf: '{other}' is already a leaf ancestor."
                )
        values[key] = values.get(key, 0.0) + float(value)

    def add_data(
        self,
        step_num_scenarios: int | None = None,
        step_rollout_tokens: int | None = None,
        scenario_ids: list[str] | None = None,
    ) -> None:
        """The step's scenario and token counts; scenario ids count toward
        `data/cum/num_unique_scenarios`."""
        if step_num_scenarios is not None:
            self.add_metric("data/step_num_scenarios", float(step_num_scenarios))
        if step_rollout_tokens is not None:
            self.add_metric("data/step_rollout_tokens", float(step_rollout_tokens))
        if scenario_ids is not None:
            self._buffer().scenario_ids.update(str(i) for i in scenario_ids)

    def add_user_timing(
        self,
        step_wall_s: float | None = None,
        step_rollout_s: float | None = None,
        step_eval_s: float | None = None,
    ) -> None:
        for key, value in (
            ("time/step_wall_s", step_wall_s),
            ("time/step_rollout_s", step_rollout_s),
            ("time/step_eval_s", step_eval_s),
        ):
            if value is not None:
                self.add_metric(key, float(value))

    def add_idle_times(
        self, step_trainer_idle_s: float | None = None, step_rollout_idle_s: float | None = None
    ) -> None:
        for key, value in (
            ("time/step_trainer_idle_s", step_trainer_idle_s),
            ("time/step_rollout_idle_s", step_rollout_idle_s),
        ):
            if value is not None:
                self.add_metric(key, float(value))

    @contextmanager
    def measure(self, key: str) -> Iterator[None]:
        """Add the seconds the block took to `key`."""
        started = time.monotonic()
        try:
            yield
        finally:
            self.add_metric(key, time.monotonic() - started)

    # -- flushing -------------------------------------------------------------------------------

    async def flush(self) -> dict[str, float]:
        """The step's metrics with their roll-ups and running totals; the buffer empties."""
        async with self._shared.lock:
            buffer = self._buffer()
            result = dict(buffer.values)
            result.update(rollups({k: v for k, v in result.items() if k.startswith("costs/")}))
            totals = self._shared.totals
            for key, value in list(result.items()):
                if key.split("/", 1)[0] not in _TOTALLED or key == _RATIO:
                    continue
                total_key = to_cumulative_metric_key(key)
                totals[total_key] = result[total_key] = totals.get(total_key, 0.0) + value
            if _RATIO in result:  # a ratio's running value is the ratio of the running sums
                nominal = totals.get("data/cum/nominal_schedule_capacity_tokens", 0.0)
                spare = totals.get("data/cum/unused_packed_capacity_tokens", 0.0) + totals.get(
                    "data/cum/dummy_schedule_capacity_tokens", 0.0
                )
                ratio_key = to_cumulative_metric_key(_RATIO)
                totals[ratio_key] = result[ratio_key] = spare / nominal if nominal else 0.0
            if buffer.scenario_ids:
                self._shared.scenario_ids.update(buffer.scenario_ids)
                result["data/cum/num_unique_scenarios"] = float(len(self._shared.scenario_ids))
            self._throughput(result)
            buffer.values.clear()
            buffer.scenario_ids.clear()
            return result

    def pending(self) -> dict[str, float]:
        """The step's raw metrics so far (a copy; the buffer keeps them)."""
        return dict(self._buffer().values)

    async def drain_pending(self) -> dict[str, float]:
        """The step's raw metrics, without roll-ups or totals; the buffer empties."""
        async with self._shared.lock:
            buffer = self._buffer()
            result = dict(buffer.values)
            buffer.values.clear()
            buffer.scenario_ids.clear()
            return result

    def _throughput(self, result: dict[str, float]) -> None:
        totals = self._shared.totals
        for touched, tokens, seconds, out in (
            (
                ("data/step_trainable_assistant_tokens", "time/step_backend_train_s"),
                "data/cum/trainable_assistant_tokens",
                "time/cum/backend_train_s",
                "throughput/avg_trainer_tok_per_s",
            ),
            (
                ("data/step_rollout_tokens", "time/step_rollout_s"),
                "data/cum/rollout_tokens",
                "time/cum/rollout_s",
                "throughput/avg_rollout_tok_per_s",
            ),
        ):
            if not any(key in result for key in touched):
                continue
            count, spent = totals.get(tokens), totals.get(seconds)
            if count is not None and spent is not None and spent > 0:
                result[out] = count / spent

    # -- contexts, registries, state ------------------------------------------------------------

    def activate(self) -> Token[MetricsBuilder]:
        """Make this the builder `track_api_cost` adds to, in this context."""
        return _active.set(self)

    @contextmanager
    def activate_context(self) -> Iterator[MetricsBuilder]:
        token = self.activate()
        try:
            yield self
        finally:
            _active.reset(token)

    @staticmethod
    def get_active() -> MetricsBuilder:
        """The active builder; LookupError when none is."""
        return _active.get()

    def for_cost_context(
        self, cost_context: str, *, buffer_scope: str | None = None
    ) -> MetricsBuilder:
        """A builder for another cost context sharing this one's totals and registries (its
        step buffer is `buffer_scope`'s, by default the context's own)."""
        context = cost_context.strip()
        if not context:
            raise ValueError("cost_context must be non-empty")
        scope = context if buffer_scope is None else buffer_scope.strip()
        if not scope:
            raise ValueError("buffer_scope must be non-empty")
        if context == self.cost_context and scope == self._scope:
            return self
        return MetricsBuilder(context, _shared_state=self._shared, _buffer_scope=scope)

    def register_cost_extractor(self, provider: str, extractor: CostExtractor) -> None:
        name = normalize_provider(provider)
        if name is None:
            raise ValueError("provider must be non-empty")
        self._shared.extractors[name] = extractor

    def register_model_pricing(
        self,
        model_name: str,
        *,
        prompt_per_million: float,
        completion_per_million: float,
        cached_prompt_per_million: float | None = None,
        cache_creation_per_million: float | None = None,
        cache_read_per_million: float | None = None,
    ) -> None:
        name = normalize_model_name(model_name)
        if not name:
            raise ValueError("model_name must be non-empty")

        def price(value: float | None) -> float | None:
            return None if value is None else float(value)

        self._shared.pricing[name] = TokenPricing(
            float(prompt_per_million),
            float(completion_per_million),
            price(cached_prompt_per_million),
            price(cache_creation_per_million),
            price(cache_read_per_million),
        )

    def state_dict(self) -> dict[str, Any]:
        """The running totals and seen scenario ids, as JSON values (to resume a run)."""
        return {
            "cum_state": dict(self._shared.totals),
            "unique_scenario_ids": list(self._shared.scenario_ids),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        totals = {str(k): float(v) for k, v in state.get("cum_state", {}).items()}
        ids = {str(v) for v in state.get("unique_scenario_ids", [])}
        self._shared.totals.clear()
        self._shared.totals.update(totals)
        self._shared.scenario_ids.clear()
        self._shared.scenario_ids.update(ids)
        self._shared.buffers.clear()

    def _buffer(self) -> _Buffer:
        return self._shared.buffers.setdefault(self._scope, _Buffer())


def rollups(costs: dict[str, float]) -> dict[str, float]:
    """Each parent path of the cost leaves with the sum below it, and `costs/all`."""
    if not costs:
        return {}
    parents = {
        "/".join(key.split("/")[:depth]) for key in costs for depth in range(2, key.count("/") + 1)
    }
    sums = {p: sum(v for k, v in costs.items() if k.startswith(f"{p}/")) for p in parents}
    tops = {f"costs/{key.split('/')[1]}" for key in costs}
    sums["costs/all"] = sum(sums[top] if top in sums else costs[top] for top in tops)
    return sums


def track_api_cost(
    *,
    source: str,
    provider: str,
    model_name: str,
    response_getter: ResponseGetter | None = None,
    prompt_price_per_million: float | None = None,
    completion_price_per_million: float | None = None,
    cached_prompt_price_per_million: float | None = None,
    cache_creation_price_per_million: float | None = None,
    cache_read_price_per_million: float | None = None,
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a function (sync or async) that calls a model API: the cost of each call's
    response (`response_getter(result)`, or the result) is added to the active
    MetricsBuilder as `costs/{its context}/{source}`. Outside an active builder nothing is
    recorded."""
    where = source.strip("/")
    if not where:
        raise ValueError("source must be non-empty")
    provider_name = normalize_provider(provider)
    if provider_name is None:
        raise ValueError("provider must be non-empty")
    model = normalize_model_name(model_name)
    if model is None:
        raise ValueError("model_name must be non-empty")
    prices = {
        "prompt_price_per_million": prompt_price_per_million,
        "completion_price_per_million": completion_price_per_million,
        "cached_prompt_price_per_million": cached_prompt_price_per_million,
        "cache_creation_price_per_million": cache_creation_price_per_million,
        "cache_read_price_per_million": cache_read_price_per_million,
    }

    def record(result: Any) -> None:
        try:
            builder = MetricsBuilder.get_active()
        except LookupError:
            return
        response = response_getter(result) if response_getter is not None else result
        builder.add_response_cost(
            where, response, provider=provider_name, model_name=model, **prices
        )

    def decorate(function: Callable[P, R]) -> Callable[P, R]:
        if inspect.iscoroutinefunction(function):

            @functools.wraps(function)
            async def run_async(*args: P.args, **kwargs: P.kwargs) -> Any:
                result = await function(*args, **kwargs)
                record(result)
                return result

            return cast(Callable[P, R], run_async)

        @functools.wraps(function)
        def run(*args: P.args, **kwargs: P.kwargs) -> R:
            result = function(*args, **kwargs)
            record(result)
            return result

        return run

    return decorate
