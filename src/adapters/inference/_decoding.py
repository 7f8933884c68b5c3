"""One batched generation on a Hugging Face causal LM: the torch engine's worker-side half.

Rows are left-padded and prefilled together, then each step feeds one token per live row
through the KV cache; a finished row leaves the batch and the cache. Each row draws from its
own seeded generator by inverse CDF, so its tokens do not depend on what else is batched.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import attrs

from ...core.errors import BackendError
from ._chat import ChatTokenizer, first_stop
from .engine import Sample, SamplingParams


@attrs.frozen
class DecodeRow:
    """One sequence to generate: its prompt, its parameters, and the seed of its stream."""

    prompt: list[int]
    params: SamplingParams
    seed: int


def generate_batch(
    module: Any,
    chat: ChatTokenizer,
    rows: Sequence[DecodeRow],
    *,
    device: Any,
    context_length: int,
    cache_kwarg: str,
    cancelled: threading.Event,
) -> list[Sample]:
    """Generate every row in one batch with `module` (call under torch.inference_mode)."""
    return _Decoder(module, chat, list(rows), device, context_length, cache_kwarg, cancelled).run()


class _Decoder:
    """One batched generation: left-padded prefill, then one token per row per step, rows
    leaving the batch (and the KV cache) as they finish."""

    def __init__(
        self,
        module: Any,
        chat: ChatTokenizer,
        rows: list[DecodeRow],
        device: Any,
        context_length: int,
        cache_kwarg: str,
        cancelled: threading.Event,
    ) -> None:
        import torch

        self.torch = torch
        self.chat = chat
        self.module = module
        self.rows = rows
        self.device = device
        self.cache_kwarg = cache_kwarg
        self.cancelled = cancelled
        self.budgets = [
            min(row.params.max_tokens, context_length - len(row.prompt)) for row in rows
        ]
        self.generators = [torch.Generator().manual_seed(row.seed) for row in rows]
        self.tokens: list[list[int]] = [[] for _ in rows]
        self.logprobs: list[list[float]] = [[] for _ in rows]
        self.tops: list[list[tuple[tuple[int, float], ...]]] = [[] for _ in rows]
        self.finish: list[str] = ["length"] * len(rows)

    def run(self) -> list[Sample]:
        torch = self.torch
        rows = self.rows
        width = max(len(row.prompt) for row in rows)
        input_ids = torch.full((len(rows), width), self.chat.pad_token_id, dtype=torch.long)
        attention = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            prompt = row.prompt
            input_ids[i, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
            attention[i, width - len(prompt) :] = 1
        input_ids, attention = input_ids.to(self.device), attention.to(self.device)
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        from transformers import DynamicCache

        cache = DynamicCache(config=self.module.config)
        params = [row.params for row in rows]
        temperature = torch.tensor([p.temperature for p in params], device=self.device)
        top_p = torch.tensor([p.top_p for p in params], device=self.device)
        greedy = temperature == 0
        top_k = max(p.top_logprobs for p in params)
        active = list(range(len(rows)))
        logits = self._forward(input_ids, attention, positions, cache)
        while True:
            if self.cancelled.is_set():
                raise BackendError("the inference engine was closed")
            uniforms = torch.stack([torch.rand((), generator=self.generators[i]) for i in active])
            chosen, chosen_lp, top_ids, top_lps = _choose(
                logits, temperature, top_p, greedy, uniforms.to(self.device), top_k
            )
            chosen_list = chosen.tolist()
            lp_list = chosen_lp.tolist()
            top_id_list = top_ids.tolist()
            top_lp_list = top_lps.tolist()
            still: list[int] = []
            for k, i in enumerate(active):
                self._append(i, chosen_list[k], lp_list[k], top_id_list[k], top_lp_list[k])
                if not self._finished(i):
                    still.append(k)
            if not still:
                break
            step_ids = chosen.unsqueeze(-1)
            if len(still) < len(active):
                keep = torch.tensor(still, device=self.device)
                cache.batch_select_indices(keep)
                active = [active[k] for k in still]
                attention, positions, step_ids = attention[keep], positions[keep], step_ids[keep]
                temperature, top_p, greedy = temperature[keep], top_p[keep], greedy[keep]
            attention = torch.cat([attention, attention.new_ones((len(active), 1))], dim=-1)
            positions = positions[:, -1:] + 1
            logits = self._forward(step_ids, attention, positions, cache)
        return [
            Sample(
                token_ids=tuple(self.tokens[i]),
                logprobs=tuple(self.logprobs[i]),
                top_logprobs=tuple(self.tops[i]),
                finish_reason="stop" if self.finish[i] == "stop" else "length",
            )
            for i in range(len(rows))
        ]

    def _forward(self, input_ids: Any, attention: Any, positions: Any, cache: Any) -> Any:
        kwargs = {self.cache_kwarg: cache}
        out = self.module(
            input_ids=input_ids,
            attention_mask=attention,
            position_ids=positions,
            use_cache=True,
            logits_to_keep=1,
            **kwargs,
        )
        return out.logits[:, -1, :].float()

    def _append(
        self, i: int, token: int, logprob: float, top_ids: list[int], top_lps: list[float]
    ) -> None:
        self.tokens[i].append(token)
        self.logprobs[i].append(logprob)
        k = self.rows[i].params.top_logprobs
        self.tops[i].append(tuple(zip(top_ids[:k], top_lps[:k])))

    def _finished(self, i: int) -> bool:
        tokens = self.tokens[i]
        if tokens[-1] in self.chat.eos_token_ids:
            self.finish[i] = "stop"
            return True
        stops = self.rows[i].params.stop
        if stops:
            # A stop string of c characters spans at most 4c byte-level tokens.
            window = 4 * max(len(stop) for stop in stops) + 4
            if first_stop(self.chat.decode(tokens[-window:]), stops) is not None:
                self.finish[i] = "stop"
                return True
        return len(tokens) >= self.budgets[i]


def _choose(
    logits: Any, temperature: Any, top_p: Any, greedy: Any, uniforms: Any, top_k: int
) -> tuple[Any, Any, Any, Any]:
    """Draw one token per row with temperature and top-p (inverse CDF on one uniform per
    row, so each row's stream depends only on its own generator), and report logprobs under
    the raw distribution."""
    import torch

    raw = torch.log_softmax(logits, dim=-1)
    probs = torch.softmax(logits / temperature.clamp_min(1e-5).unsqueeze(-1), dim=-1)
    if bool((top_p < 1.0).any()):
        # Top-p needs the tokens by probability; plain sampling works in any order.
        probs, order = probs.sort(dim=-1, descending=True)
        mass_before = probs.cumsum(dim=-1) - probs
        probs = probs.masked_fill(mass_before >= top_p.unsqueeze(-1), 0.0)
    else:
        order = None
    cdf = probs.cumsum(dim=-1)
    targets = (uniforms * cdf[:, -1]).unsqueeze(-1)
    # right=True: the first token whose cumulative mass exceeds the target, so a token of
    # zero probability (truncated or underflowed) is never picked, even for a target of 0.
    picks = torch.searchsorted(cdf, targets, right=True).clamp(max=logits.shape[-1] - 1)
    sampled = (picks if order is None else order.gather(-1, picks)).squeeze(-1)
    chosen = torch.where(greedy, logits.argmax(dim=-1), sampled)
    chosen_lp = raw.gather(-1, chosen.unsqueeze(-1)).squeeze(-1)
    if top_k:
        top_lps, top_ids = raw.topk(top_k, dim=-1)
    else:
        top_lps = top_ids = raw.new_zeros((logits.shape[0], 0))
    return chosen, chosen_lp, top_ids, top_lps
