"""Sampling for the tinker emulator: `n` completions of one prompt from a (LoRA) module.

The `n` rows share the prompt, so they run as one batch with a KV cache and no padding.
Logprobs are under the raw distribution (temperature 1, no top-k/top-p), the convention of
arthex's engines, whatever the sampling temperature.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import attrs
import torch

from .base_model import BaseModel
from .errors import UserError


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
    """`n` completions of `prompt` (one batch sharing the prompt, with a KV cache), and the
    prompt's own logprobs (NaN for the first token) when asked for."""
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
    stop_tokens = set(settings.stop_tokens)
    if settings.stop_at_end_token:
        stop_tokens.update(base.eos_token_ids)
    generator = torch.Generator(device="cpu")
    if settings.seed is not None:
        generator.manual_seed(settings.seed)
    else:
        generator.seed()
    device = base.device
    rows: list[list[int]] = [[] for _ in range(n)]
    logprobs: list[list[float]] = [[] for _ in range(n)]
    tops: list[list[list[tuple[int, float]]]] = [[] for _ in range(n)]
    reasons: list[str | None] = [None] * n
    prompt_lps: list[float] | None = None
    cache = base.new_cache()
    with torch.no_grad():
        ids = torch.tensor([prompt] * n, device=device)
        logits = base.forward(module, ids, cache)
        if prompt_logprobs:
            logp = torch.log_softmax(logits[0, :-1], dim=-1)
            picked = logp.gather(-1, ids[0, 1:].unsqueeze(-1)).squeeze(-1)
            prompt_lps = [math.nan, *(float(v) for v in picked.cpu())]
        last = logits[:, -1]
        for _ in range(limit):
            raw = torch.log_softmax(last, dim=-1)
            chosen = _draw(last, settings, generator).to(device)
            chosen_lp = raw.gather(-1, chosen.unsqueeze(-1)).squeeze(-1)
            top = torch.topk(raw, topk, dim=-1) if topk > 0 else None
            for i in range(n):
                if reasons[i] is not None:
                    continue
                token = int(chosen[i])
                rows[i].append(token)
                logprobs[i].append(float(chosen_lp[i]))
                if top is not None:
                    tops[i].append(
                        [(int(t), float(v)) for t, v in zip(top.indices[i], top.values[i])]
                    )
                if token in stop_tokens or _hits_stop(base, rows[i], settings.stop_strings):
                    reasons[i] = "stop"
            if all(reason is not None for reason in reasons):
                break
            last = base.forward(module, chosen.unsqueeze(-1), cache)[:, -1]
    sampled = [
        SampledRow(
            tokens=rows[i],
            logprobs=logprobs[i],
            stop_reason=reasons[i] or "length",
            topk=tops[i] if topk > 0 else None,
        )
        for i in range(n)
    ]
    return sampled, prompt_lps


def _draw(
    logits: torch.Tensor, settings: SampleSettings, generator: torch.Generator
) -> torch.Tensor:
    if settings.temperature <= 0:
        return logits.argmax(dim=-1)
    scaled = (logits / settings.temperature).cpu()
    if settings.top_k > 0:
        kth = torch.topk(scaled, min(settings.top_k, scaled.shape[-1]), dim=-1).values[:, -1:]
        scaled = scaled.masked_fill(scaled < kth, -math.inf)
    probs = torch.softmax(scaled, dim=-1)
    if settings.top_p < 1.0:
        ordered, order = torch.sort(probs, dim=-1, descending=True)
        keep = torch.cumsum(ordered, dim=-1) - ordered < settings.top_p
        ordered = ordered * keep
        probs = torch.zeros_like(probs).scatter(-1, order, ordered)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def _hits_stop(base: BaseModel, tokens: list[int], stops: tuple[str, ...]) -> bool:
    if not stops:
        return False
    text = str(base.tokenizer.decode(tokens, skip_special_tokens=False))
    return any(stop in text for stop in stops)
