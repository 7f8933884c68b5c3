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


@attrs.frozen
class SampleRequest:
    """One `asample`: `n` completions of `prompt`, from the peft adapter named `adapter` of
    the module it is batched on (None: the module as it is)."""

    prompt: list[int]
    n: int
    settings: SampleSettings
    topk: int = 0
    prompt_logprobs: bool = False
    adapter: str | None = None


Sampled = tuple[list[SampledRow], list[float] | None]
"""A request's completions, and its prompt's logprobs when it asked for them."""


def sample(
    base: BaseModel,
    module: Any,
    prompt: Sequence[int],
    n: int,
    settings: SampleSettings,
    *,
    topk: int = 0,
    prompt_logprobs: bool = False,
) -> Sampled:
    """`n` completions of `prompt`, and the prompt's own logprobs (NaN for the first token)
    when asked for."""
    request = SampleRequest([int(t) for t in prompt], n, settings, topk, prompt_logprobs)
    return sample_batch(base, module, [(request, decode_rows(base, request))])[0]


def decode_rows(base: BaseModel, request: SampleRequest) -> list[Any]:
    """The request's rows for the decode code (DecodeRow), or a UserError naming what is
    wrong with it."""
    from ....adapters.inference.decoding import DecodeRow, row_seed
    from ....adapters.inference.engine import SamplingParams
    from ....core.errors import InvalidInputError

    prompt, n, settings = request.prompt, request.n, request.settings
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
            top_logprobs=request.topk,
        )
    except InvalidInputError as exc:
        raise UserError(f"sampling_params: {exc}") from exc
    return [
        DecodeRow(
            prompt,
            params,
            row_seed(settings.seed, index),
            top_k=max(settings.top_k, 0),
            stop_token_ids=frozenset(settings.stop_tokens),
            stop_at_eos=settings.stop_at_end_token,
            prompt_logprobs=request.prompt_logprobs and index == 0,  # the rows share the prompt
            adapter=request.adapter,
        )
        for index in range(n)
    ]


def sample_batch(
    base: BaseModel, module: Any, requests: Sequence[tuple[SampleRequest, list[Any]]]
) -> list[Sampled]:
    """Every request's rows (from `decode_rows`) as one batch of the inference engine's
    decode code (run_session) on the calling thread, each row on its own seeded stream; the
    results in the requests' order."""
    from ....adapters.inference.decoding import run_session

    first = [
        ((number, index), row)
        for number, (_request, rows) in enumerate(requests)
        for index, row in enumerate(rows)
    ]
    feed = _Collected()
    with torch.no_grad():
        run_session(
            module,
            base.decode_tokens,
            feed,
            first,
            device=base.device,
            context_length=base.context_length,
            cache_kwarg=base.cache_kwarg,
            cancelled=threading.Event(),
            max_batch_size=len(first),
        )
    out: list[Sampled] = []
    for number, (request, rows) in enumerate(requests):
        done = [feed.samples[(number, index)] for index in range(len(rows))]
        sampled = [
            SampledRow(
                tokens=list(row.token_ids),
                logprobs=list(row.logprobs),
                stop_reason=row.finish_reason,
                topk=[list(step) for step in row.top_logprobs] if request.topk > 0 else None,
            )
            for row in done
        ]
        scored = done[0].prompt_logprobs
        out.append((sampled, list(scored) if scored is not None else None))
    return out


class _Collected:
    """The decode code's feed for one batch: no rows join, every row is kept."""

    def __init__(self) -> None:
        self.samples: dict[Any, Sample] = {}

    def take(self, room: int, live: int) -> list[tuple[Any, Any]]:
        return []

    def abandoned(self, handle: Any) -> bool:
        return False

    def finished(self, handle: Any, sample: Sample) -> None:
        self.samples[handle] = sample

    def stepped(self, rows: int) -> None:
        return None
