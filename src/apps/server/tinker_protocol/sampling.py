"""Sampling for the Tinker protocol: `n` completions of one prompt from a (LoRA) module,
decoded by the inference engine's decode code (adapters/inference/decoding.py), the one
decode loop in arthex; this module only maps Tinker's parameters onto it and its results
back. Logprobs are under the raw distribution (temperature 1, no top-k/top-p), the
convention of arthex's engines, whatever the sampling temperature.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs
import torch

from .base_model import BaseModel
from .errors import UserError

if TYPE_CHECKING:
    from ....adapters.inference.engine import Sample


@attrs.frozen
class SampleSettings:
    max_tokens: int | None = None
    seed: int | None = None
    temperature: float = 1.0
    top_k: int = -1
    top_p: float = 1.0
    stop_strings: tuple[str, ...] = ()
    stop_tokens: tuple[int, ...] = ()
    stop_at_end_token: bool = True  # Tinker's `stop=[]` turns even the end token off


@attrs.frozen
class SampledRow:
    tokens: list[int]
    logprobs: list[float]
    stop_reason: str  # "stop" | "length"
    topk: list[list[tuple[int, float]]] | None


def sample(
    base: BaseModel,
    module: Any,
    prompt: Sequence[int],
    n: int,
    settings: SampleSettings,
    *,
    topk: int = 0,
    prompt_logprobs: bool = False,
) -> tuple[list[SampledRow], list[float] | None]:
    """`n` completions of `prompt`, and the prompt's own logprobs (NaN for the first token)
    when asked for: one batch of the inference engine's decode code (run_session) on the
    compute thread, each row on its own seeded stream."""
    from ....adapters.inference.decoding import DecodeRow, row_seed, run_session
    from ....adapters.inference.engine import SamplingParams
    from ....core.errors import InvalidInputError

    prompt = [int(t) for t in prompt]
    if not prompt:
        raise UserError("the prompt is empty")
    if n < 1:
        raise UserError(f"num_samples must be >= 1, got {n}")
    for token in prompt:
        if not 0 <= token < base.vocab_size:
            raise UserError(f"prompt token {token} is outside the vocabulary")
    room = base.context_length - len(prompt)
    if room < 1:
        raise UserError(
            f"the prompt has {len(prompt)} tokens; the model's context holds {base.context_length}"
        )
    limit = min(settings.max_tokens if settings.max_tokens is not None else room, room)
    if limit < 1:
        raise UserError(f"max_tokens must be >= 1, got {settings.max_tokens}")
    try:
        params = SamplingParams(
            max_tokens=limit,
            temperature=max(settings.temperature, 0.0),
            top_p=settings.top_p,
            seed=settings.seed,
            stop=settings.stop_strings,
            top_logprobs=topk,
        )
    except InvalidInputError as exc:
        raise UserError(f"sampling_params: {exc}") from exc
    rows = [
        DecodeRow(
            prompt,
            params,
            row_seed(settings.seed, index),
            top_k=max(settings.top_k, 0),
            stop_token_ids=frozenset(settings.stop_tokens),
            stop_at_eos=settings.stop_at_end_token,
            prompt_logprobs=prompt_logprobs and index == 0,  # the rows share the prompt
        )
        for index in range(n)
    ]
    feed = _Collected(n)
    with torch.no_grad():
        run_session(
            module,
            base.decode_tokens,
            feed,
            list(enumerate(rows)),
            device=base.device,
            context_length=base.context_length,
            cache_kwarg=base.cache_kwarg,
            cancelled=threading.Event(),
            max_batch_size=n,
        )
    sampled = [
        SampledRow(
            tokens=list(done.token_ids),
            logprobs=list(done.logprobs),
            stop_reason=done.finish_reason,
            topk=[list(step) for step in done.top_logprobs] if topk > 0 else None,
        )
        for done in feed.samples
    ]
    first = feed.samples[0].prompt_logprobs
    return sampled, list(first) if first is not None else None


class _Collected:
    """The decode code's feed for one request: no rows join, every row is kept."""

    def __init__(self, n: int) -> None:
        self._samples: list[Sample | None] = [None] * n

    @property
    def samples(self) -> list[Sample]:
        return [s for s in self._samples if s is not None]

    def take(self, room: int, live: int) -> list[tuple[Any, Any]]:
        return []

    def abandoned(self, handle: Any) -> bool:
        return False

    def finished(self, handle: Any, sample: Sample) -> None:
        self._samples[int(handle)] = sample

    def stepped(self, rows: int) -> None:
        return None
