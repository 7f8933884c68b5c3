"""ART's model methods that have no arthex name of their own, mixed into `arthex.Model` and
`arthex.TrainableModel`: `litellm_completion_params`, `update_wandb_config`, the step
metrics builder (`metrics_builder`, `activate_metrics_context`), and a trainable model's
cost calculator (`set_cost_calculator`, `cost_calculator`).

Cost metrics land in the history like any metric: at `model.log(split=...)`, what the split's
builder gathered since the last log (`costs/train/...` for train, `costs/eval/...` for val and
test) joins the row with the `costs/...` keys the caller passed, each parent path of them gets
the sum below it and `costs/all` the row's total; the history then adds every `costs/cum/...`
running total from its own ledger, so totals survive a restart. A cost calculator prices each
chat completion made through `model.openai_client()` while a builder is active.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import Token
from typing import TYPE_CHECKING, Any

from ..core.errors import InvalidInputError
from .builder import MetricsBuilder, rollups
from .pricing import CostCalculator

if TYPE_CHECKING:
    from openai import AsyncOpenAI

__all__ = ["ArtModelMethods", "ArtTrainableMethods"]

_HOSTED_VLLM = "hosted_vllm/"  # LiteLLM's provider prefix for an OpenAI-compatible vLLM server
_COSTS = "costs/"


class ArtModelMethods:
    """ART's methods on every model. Mixed in ahead of the core's Model."""

    _art_builder: MetricsBuilder | None = None
    _art_wandb_config: dict[str, Any] | None = None

    if TYPE_CHECKING:
        name: str
        inference_base_url: str | None
        inference_api_key: str | None

        @property
        def trainable(self) -> bool: ...

        def get_inference_name(self, step: int | None = None) -> str: ...

        def _record_config(self, extra: Mapping[str, Any] | None = None) -> None: ...

    def litellm_completion_params(self, step: int | None = None) -> dict[str, Any]:
        """What to pass to `litellm.completion(...)` to reach this model (a trainable one as
        LiteLLM's `hosted_vllm/` provider), at `step` or the latest."""
        name = self.get_inference_name(step)
        return {
            "model": f"{_HOSTED_VLLM}{name}" if self.trainable else name,
            "base_url": self.inference_base_url,
            "api_key": self.inference_api_key,
            "temperature": 1,  # sampling as in training
        }

    def update_wandb_config(self, config: dict[str, Any]) -> None:
        """Merge `config` into the run's wandb config (now, or when the wandb run starts). A key
        already set to another value is refused, as ART refuses it (ValueError naming its
        dotted path); nothing is merged then."""
        if not isinstance(config, dict):
            raise TypeError("config must be a dict[str, Any]")
        merged = _merge_once(self._art_wandb_config or {}, config, "")
        self._art_wandb_config = merged
        self._record_config(config)

    def metrics_builder(self, cost_context: str | None = None) -> MetricsBuilder:
        """The model's step metrics builder (cost context `train`), or the one of
        `cost_context`, sharing its running totals."""
        if self._art_builder is None:
            self._art_builder = MetricsBuilder(cost_context="train")
        if cost_context is None:
            return self._art_builder
        return self._art_builder.for_cost_context(cost_context)

    def activate_metrics_context(self, cost_context: str) -> Token[MetricsBuilder]:
        """Make `cost_context`'s builder the active one (where `track_api_cost` and the cost
        calculator add)."""
        return self.metrics_builder(cost_context).activate()

    async def _art_step_metrics(
        self, split: str, metrics: Mapping[str, Any] | None
    ) -> dict[str, Any] | None:
        """The caller's metrics with the split builder's pending values and the cost roll-ups
        (None: nothing to add, the caller's metrics go on as they are)."""
        builder = None
        pending: dict[str, float] = {}
        if self._art_builder is not None:
            context = {"train": "train", "val": "eval", "test": "eval"}.get(split, split)
            builder = self._art_builder.for_cost_context(context, buffer_scope=context)
            pending = builder.pending()
        given = dict(metrics or {})
        costs = {
            k: float(v)
            for k, v in {**pending, **given}.items()
            if k.startswith(_COSTS) and v is not None
        }
        if not pending and not costs:
            return None
        for key in costs:  # a leaf cannot also be a parent: its roll-up would replace it
            below = next((other for other in costs if other.startswith(f"{key}/")), None)
            if below is not None or key == "costs/all":
                raise InvalidInputError(
                    f"cannot log {key!r} as a cost: "
                    + (f"it is a parent of {below!r}" if below else "it is the row's total")
                    + "; its value is the sum of the costs below it"
                )
        if builder is not None:  # taken only once the row is sure to be written
            await builder.drain_pending()
        return {**pending, **given, **rollups(costs)}


class ArtTrainableMethods:
    """ART's cost calculator on a trainable model."""

    _art_calculator: CostCalculator | None = None

    @property
    def cost_calculator(self) -> CostCalculator:
        """(prompt tokens, completion tokens, cost context) -> `costs/...` metrics; by default
        nothing is priced."""
        return self._art_calculator or _no_costs

    def set_cost_calculator(self, calculator: CostCalculator | None) -> None:
        """Price each chat completion made through `openai_client()` while a MetricsBuilder is
        active (its cost context names the keys); None stops pricing."""
        self._art_calculator = calculator

    def _art_record_completion(self, response: Any) -> None:
        if self._art_calculator is None:
            return
        try:
            builder = MetricsBuilder.get_active()
        except LookupError:
            return
        usage = getattr(response, "usage", None)
        prompt = int(getattr(usage, "prompt_tokens", 0) or 0)
        completion = int(getattr(usage, "completion_tokens", 0) or 0)
        choices = len(getattr(response, "choices", None) or [])
        context = builder.cost_context.strip("/")
        if not context:
            return
        # the prompt is processed once per choice, so it is priced once per choice
        for key, value in self._art_calculator(
            prompt * max(choices, 1), completion, context
        ).items():
            if key.startswith(_COSTS):
                builder.add_cost(key.removeprefix(_COSTS), float(value))

    def _art_wrap_client(self, client: AsyncOpenAI) -> AsyncOpenAI:
        """The client, its `chat.completions.create` reporting each response to the cost
        calculator (once per client)."""
        completions = client.chat.completions
        if getattr(completions, "_arthex_costed", False):
            return client
        create = completions.create
        record = self._art_record_completion

        async def create_and_price(*args: Any, **kwargs: Any) -> Any:
            response = await create(*args, **kwargs)
            record(response)
            return response

        completions.create = create_and_price  # type: ignore[method-assign]
        completions._arthex_costed = True  # type: ignore[attr-defined]
        return client


def _no_costs(
    prompt_tokens: int | None, completion_tokens: int | None, context: str
) -> dict[str, float]:
    return {}


def _merge_once(existing: dict[str, Any], updates: Mapping[str, Any], path: str) -> dict[str, Any]:
    merged = dict(existing)
    for key, value in updates.items():
        where = f"{path}.{key}" if path else key
        if key not in merged:
            merged[key] = value
        elif isinstance(merged[key], dict) and isinstance(value, dict):
            merged[key] = _merge_once(merged[key], value, where)
        elif merged[key] != value:
            raise ValueError(f"W&B config is immutable once set. Conflicting value for '{where}'.")
    return merged
