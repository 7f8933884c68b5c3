"""The small interface every sampling engine offers the inference server.

The server speaks HTTP and the OpenAI wire shape; an engine only turns prompt token ids into
sampled token ids with logprobs. Keeping that seam narrow is what lets the torch engine, the
vLLM engine and the Tinker sampler sit behind the same server.

Logprob convention (the trainer relies on it): `Sample.logprobs[i]` is the log-probability
of the i-th sampled token under the served weights' *raw* distribution, i.e.
`log_softmax(logits)` with temperature 1 and no top-p truncation, even when the token was
drawn with another temperature or top-p. The trainer computes its "new" logprobs the same
way, so the importance ratio compares like with like; vLLM's default `raw_logprobs` mode
reports the same quantity. `top_logprobs` come from that raw distribution too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, Protocol, TypeAlias

import attrs

from ...core.errors import ArthexError, InvalidInputError

__all__ = [
    "FinishReason",
    "JsonItems",
    "Sample",
    "SamplingEngine",
    "SamplingParams",
    "UnknownModelError",
]

FinishReason = Literal["stop", "length", "abort", "repetition"]
JsonItems: TypeAlias = Sequence[Mapping[str, Any]]
"""A request's messages or tools, as the JSON objects they arrived as."""
MAX_TOP_LOGPROBS = 20


class UnknownModelError(ArthexError, KeyError):
    """The engine serves no model by this name."""

    def __init__(self, model: str, served: Sequence[str] = ()) -> None:
        self.model = model
        listing = ", ".join(repr(name) for name in sorted(served)) or "none"
        super().__init__(
            f"model {model!r} is not served; served models: {listing}. Use a name from "
            "GET /v1/models (e.g. `model.get_inference_name()`)."
        )

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


def _non_negative_int(name: str, lowest: int = 0, highest: int | None = None) -> Any:
    def check(_instance: object, _attribute: object, value: object) -> None:
        if not isinstance(value, int) or isinstance(value, bool) or value < lowest:
            raise InvalidInputError(f"{name} must be an integer >= {lowest}, got {value!r}")
        if highest is not None and value > highest:
            raise InvalidInputError(f"{name} must be at most {highest}, got {value!r}")

    return check


def _check_temperature(_instance: object, _attribute: object, value: float) -> None:
    if not 0.0 <= value <= 100.0:
        raise InvalidInputError(f"temperature must be between 0 and 100, got {value!r}")


def _check_top_p(_instance: object, _attribute: object, value: float) -> None:
    if not 0.0 < value <= 1.0:
        raise InvalidInputError(f"top_p must be in (0, 1], got {value!r}")


def _as_tuple(value: Iterable[str]) -> tuple[str, ...]:
    if isinstance(value, str):  # a lone string is one stop, not one per character
        return (value,)
    return tuple(value)


def _check_stop(_instance: object, _attribute: object, value: tuple[str, ...]) -> None:
    for item in value:
        if not isinstance(item, str) or not item:
            raise InvalidInputError(f"stop strings must be non-empty strings, got {item!r}")


def _check_seed(_instance: object, _attribute: object, value: int | None) -> None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
        raise InvalidInputError(f"seed must be an integer or None, got {value!r}")


@attrs.frozen
class SamplingParams:
    """How to sample. temperature 0 means greedy; `seed` makes a request reproducible (the
    i-th of its n samples always draws from the same random stream)."""

    max_tokens: int = attrs.field(default=256, validator=_non_negative_int("max_tokens", 1))
    temperature: float = attrs.field(default=1.0, converter=float, validator=_check_temperature)
    top_p: float = attrs.field(default=1.0, converter=float, validator=_check_top_p)
    seed: int | None = attrs.field(default=None, validator=_check_seed)
    stop: tuple[str, ...] = attrs.field(default=(), converter=_as_tuple, validator=_check_stop)
    top_logprobs: int = attrs.field(
        default=0, validator=_non_negative_int("top_logprobs", 0, MAX_TOP_LOGPROBS)
    )


@attrs.frozen
class Sample:
    """One completion. `token_ids` include the end-of-sequence token when the model emitted
    one, and the token that completed a stop string; `logprobs` has one entry per token,
    under the raw distribution (see the module docstring). `prompt_logprobs`, when a caller
    of the decode code asked for them, score the prompt's tokens (NaN for the first)."""

    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    top_logprobs: tuple[tuple[tuple[int, float], ...], ...]
    finish_reason: FinishReason
    prompt_logprobs: tuple[float, ...] | None = None


class SamplingEngine(Protocol):
    """What the inference server needs from an engine. Every name in `served_models()` can
    be sampled; one tokenizer (the base model's) serves every name."""

    def served_models(self) -> list[str]: ...

    def render_chat(self, model: str, messages: JsonItems, tools: JsonItems | None) -> list[int]:
        """The prompt token ids: the chat template with the generation prompt appended."""
        ...

    def decode(self, model: str, token_ids: Sequence[int]) -> str:
        """Text of the tokens, special tokens left out."""
        ...

    def token_text(self, model: str, token_id: int) -> str: ...

    async def sample(
        self, model: str, prompt_token_ids: Sequence[int], n: int, params: SamplingParams
    ) -> list[Sample]:
        """`n` independent completions of the prompt; raises UnknownModelError for a name
        that is not served and InvalidInputError for a prompt the model cannot take."""
        ...

    async def close(self) -> None: ...


class ServingEngine(SamplingEngine, Protocol):
    """An engine a backend drives: it also changes what is served, step by step."""

    async def start(self) -> None:
        """Load what sampling needs (weights, tokenizer); idempotent."""
        ...

    async def load(self, name: str, source: str | None, /) -> None:
        """Serve `name` from `source` (a checkpoint directory, a sampler path; None: the base
        model), replacing what it served once the new weights are ready."""
        ...

    def alias(self, name: str, target: str, /) -> None:
        """Make `name` serve whatever `target` serves now (e.g. "agent" -> "agent@3")."""
        ...

    async def unload(self, name: str, /) -> None:
        """Stop serving `name`; requests already accepted finish."""
        ...

    def is_served(self, name: str, /) -> bool: ...
