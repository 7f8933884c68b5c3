"""Batched generation on a Hugging Face causal LM: the torch engine's worker-side half.

A session starts with the rows waiting at the time: they are left-padded and prefilled
together, then each step feeds one token per live row through the KV cache. A row that
finishes leaves the batch (and the cache) at once and is handed back without waiting for
the rest. Rows that arrive while a session runs are prefilled on their own and join the
batch at the next step, so a caller never waits for a whole batch it was too late for; this
matters most behind the HTTP server, where requests trickle in one round trip apart.
Joining needs a cache whose layers are plain per-token key/value tensors; for any other
cache (sliding windows, recurrent state) new rows wait for the batch to drain instead.

Each row draws from its own seeded generator by inverse CDF, so its tokens do not depend
on what else is batched.

Beyond the OpenAI server's parameters a row may ask for what Tinker's sampler offers: top-k
truncation, stop token ids, no stop at the end token, and the prompt's own logprobs (scored
in the prefill pass that reads the prompt anyway). Rows may name a peft adapter each: a batch
of several adapters over one base runs as one batch, peft applying each row's own adapter
(its mixed-batch inference), the others' rows seeing none of it.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Sequence
from typing import Any, Protocol

import attrs

from ...core.errors import BackendError
from .chat import first_stop
from .engine import Sample, SamplingParams
from .token_draw import choose, prompt_logprobs

BASE_ADAPTER = "__base__"
"""peft's name for "no adapter" in a mixed batch."""


class DecodeTokenizer(Protocol):
    """What decoding needs of a tokenizer (ChatTokenizer is one)."""

    @property
    def eos_token_ids(self) -> frozenset[int]: ...

    @property
    def pad_token_id(self) -> int: ...

    def decode(self, token_ids: Sequence[int]) -> str: ...


@attrs.frozen
class DecodeRow:
    """One sequence to generate: its prompt, its parameters, and the seed of its stream.

    `top_k` > 0 samples among the k likeliest tokens only; `stop_token_ids` end the row like
    the end token does; `stop_at_eos=False` lets it run past the end token; `prompt_logprobs`
    asks for the prompt's own logprobs (NaN for its first token) in the Sample. `adapter`
    names the peft adapter the row samples from (None: the module as it is set up)."""

    prompt: list[int]
    params: SamplingParams
    seed: int
    top_k: int = 0
    stop_token_ids: frozenset[int] = frozenset()
    stop_at_eos: bool = True
    prompt_logprobs: bool = False
    adapter: str | None = None


def row_seed(seed: int | None, index: int) -> int:
    """The seed of the `index`-th row of a request: fixed by the request's seed (each row its
    own stream), random without one."""
    return secrets.randbits(63) if seed is None else (seed * 1_000_003 + index) % (1 << 63)


class RowFeed(Protocol):
    """The engine's side of a session; `handle` is whatever the engine tags a row with.
    Called on the worker thread."""

    def take(self, room: int, live: int) -> list[tuple[Any, DecodeRow]]:
        """Rows waiting to join a batch of `live` rows, at most `room`; an empty list when
        none should join now."""
        ...

    def abandoned(self, handle: Any) -> bool:
        """Whether the caller gave up on this row, so it can leave the batch unfinished."""
        ...

    def finished(self, handle: Any, sample: Sample) -> None: ...

    def stepped(self, rows: int) -> None:
        """One token was drawn for each of `rows` rows."""
        ...


def run_session(
    module: Any,
    chat: DecodeTokenizer,
    feed: RowFeed,
    first: Sequence[tuple[Any, DecodeRow]],
    *,
    device: Any,
    context_length: int,
    cache_kwarg: str,
    cancelled: threading.Event,
    max_batch_size: int,
) -> None:
    """Generate `first` and every row `feed` adds while the batch lives, handing each one to
    `feed.finished` as it ends (call under torch.inference_mode)."""
    session = _Session(module, chat, feed, device, context_length, cache_kwarg)
    session.advance(list(first))
    while session.live:
        if cancelled.is_set():
            raise BackendError("the inference engine was closed")
        session.sample()
        joining: list[tuple[Any, DecodeRow]] = []
        room = max_batch_size - len(session.live)
        if room > 0 and (session.can_join or not session.live):
            joining = feed.take(room, len(session.live))
        session.advance(joining)


@attrs.define(eq=False)
class _Live:
    """One row in the batch and what it has produced so far."""

    handle: Any
    row: DecodeRow
    generator: Any
    budget: int
    tokens: list[int] = attrs.Factory(list)
    logprobs: list[float] = attrs.Factory(list)
    tops: list[tuple[tuple[int, float], ...]] = attrs.Factory(list)
    prompt_logprobs: tuple[float, ...] | None = None
    finish: str | None = None


class _Session:
    """The live batch: per-row state in `live`, and row-aligned tensors (attention mask,
    last positions, sampling parameters, next-token logits, KV cache)."""

    def __init__(
        self,
        module: Any,
        chat: DecodeTokenizer,
        feed: RowFeed,
        device: Any,
        context_length: int,
        cache_kwarg: str,
    ) -> None:
        import torch

        self.torch = torch
        self.module = module
        self.chat = chat
        self.feed = feed
        self.device = device
        self.context_length = context_length
        self.cache_kwarg = cache_kwarg
        self.live: list[_Live] = []
        self.can_join = False
        self.cache: Any = None
        self.attention: Any = None
        self.positions: Any = None
        self.temperature: Any = None
        self.top_p: Any = None
        self.logits: Any = None
        self.step_ids: Any = None

    # one step: sample, retire, then advance (the kept rows one token, new rows prefilled)

    def sample(self) -> None:
        """Draw the next token of every live row; hand back the rows that finished and drop
        them, and those whose caller left, from the batch."""
        torch = self.torch
        uniforms = torch.stack([torch.rand((), generator=live.generator) for live in self.live])
        top_k = max(live.row.params.top_logprobs for live in self.live)
        truncate = [live.row.top_k for live in self.live]
        chosen, chosen_lp, top_ids, top_lps = choose(
            self.logits,
            self.temperature,
            self.top_p,
            uniforms.to(self.device),
            top_k,
            torch.tensor(truncate, device=self.device) if any(truncate) else None,
        )
        self.feed.stepped(len(self.live))
        chosen_list = chosen.tolist()
        lp_list = chosen_lp.tolist()
        top_id_list = top_ids.tolist()
        top_lp_list = top_lps.tolist()
        keep: list[int] = []
        for k, live in enumerate(self.live):
            live.tokens.append(chosen_list[k])
            live.logprobs.append(lp_list[k])
            wanted = live.row.params.top_logprobs
            live.tops.append(tuple(zip(top_id_list[k][:wanted], top_lp_list[k][:wanted])))
            if self._finished(live):
                self.feed.finished(live.handle, _sample_of(live))
            elif not self.feed.abandoned(live.handle):
                keep.append(k)
        self.step_ids = chosen.unsqueeze(-1)
        if len(keep) < len(self.live):
            self._select(keep)

    def advance(self, joining: list[tuple[Any, DecodeRow]]) -> None:
        """Run the kept rows one token on, prefill `joining`, and make one batch of both."""
        torch = self.torch
        if self.live:
            self.attention = torch.cat(
                [self.attention, self.attention.new_ones((len(self.live), 1))], dim=-1
            )
            self.positions = self.positions + 1
            adapters = [live.row.adapter for live in self.live]
            self.logits = self._forward(
                self.step_ids, self.attention, self.positions, self.cache, adapters
            )
        if not joining:
            return
        rows = [row for _, row in joining]
        cache, attention, positions, logits, prompt_lps = self._prefill(rows)
        temperature = torch.tensor([row.params.temperature for row in rows], device=self.device)
        top_p = torch.tensor([row.params.top_p for row in rows], device=self.device)
        new = [
            _Live(
                handle,
                row,
                torch.Generator().manual_seed(row.seed),
                min(row.params.max_tokens, self.context_length - len(row.prompt)),
                prompt_logprobs=scored,
            )
            for (handle, row), scored in zip(joining, prompt_lps)
        ]
        if not self.live:
            self.cache, self.attention, self.positions, self.logits = (
                cache,
                attention,
                positions,
                logits,
            )
            self.temperature, self.top_p, self.live = temperature, top_p, new
            self.can_join = _plain_layers(cache) is not None
            return
        self._merge(cache, attention)
        self.positions = torch.cat([self.positions, positions])
        self.logits = torch.cat([self.logits, logits])
        self.temperature = torch.cat([self.temperature, temperature])
        self.top_p = torch.cat([self.top_p, top_p])
        self.live.extend(new)

    # internals

    def _prefill(
        self, rows: list[DecodeRow]
    ) -> tuple[Any, Any, Any, Any, list[tuple[float, ...] | None]]:
        torch = self.torch
        width = max(len(row.prompt) for row in rows)
        input_ids = torch.full((len(rows), width), self.chat.pad_token_id, dtype=torch.long)
        attention = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            input_ids[i, width - len(row.prompt) :] = torch.tensor(row.prompt, dtype=torch.long)
            attention[i, width - len(row.prompt) :] = 1
        input_ids, attention = input_ids.to(self.device), attention.to(self.device)
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        from transformers import DynamicCache

        cache = DynamicCache(config=self.module.config)
        scored = any(row.prompt_logprobs for row in rows)
        adapters = [row.adapter for row in rows]
        logits = self._forward(
            input_ids, attention, positions, cache, adapters, every_position=scored
        )
        prompt_lps: list[tuple[float, ...] | None] = [None] * len(rows)
        if scored:
            for i, row in enumerate(rows):
                if row.prompt_logprobs:
                    prompt_lps[i] = prompt_logprobs(logits[i], input_ids[i], len(row.prompt))
            logits = logits[:, -1]
        return cache, attention, positions[:, -1:], logits, prompt_lps

    def _select(self, keep: list[int]) -> None:
        """Keep only the rows at `keep`, and cut the cache's leading columns that no kept
        row attends to (what was left padding for rows now gone)."""
        self.live = [self.live[k] for k in keep]
        if not keep:
            self.cache = None
            return
        index = self.torch.tensor(keep, device=self.device)
        self.cache.batch_select_indices(index)
        self.attention = self.attention[index]
        self.positions, self.step_ids = self.positions[index], self.step_ids[index]
        self.temperature, self.top_p = self.temperature[index], self.top_p[index]
        layers = _plain_layers(self.cache)
        if layers is None:
            return
        start = int(self.attention.any(dim=0).int().argmax())
        if start > 0:
            self.attention = self.attention[:, start:]
            for layer in layers:
                layer.keys = layer.keys[:, :, start:]
                layer.values = layer.values[:, :, start:]

    def _merge(self, cache: Any, attention: Any) -> None:
        """Append the rows of another cache to this batch, left-padding whichever is shorter
        (padding is masked out, and every row has its own positions)."""
        from torch.nn.functional import pad

        ours, theirs = _plain_layers(self.cache), _plain_layers(cache)
        assert ours is not None and theirs is not None and len(ours) == len(theirs)
        width = max(self.attention.shape[1], attention.shape[1])

        def widen(tensor: Any, dim_from_end: int) -> Any:
            missing = width - tensor.shape[-dim_from_end]
            if not missing:
                return tensor
            return pad(tensor, (0, 0) * (dim_from_end - 1) + (missing, 0))

        for mine, other in zip(ours, theirs):
            mine.keys = self.torch.cat([widen(mine.keys, 2), widen(other.keys, 2)])
            mine.values = self.torch.cat([widen(mine.values, 2), widen(other.values, 2)])
        self.attention = self.torch.cat([widen(self.attention, 1), widen(attention, 1)])

    def _forward(
        self,
        input_ids: Any,
        attention: Any,
        positions: Any,
        cache: Any,
        adapters: list[str | None],
        *,
        every_position: bool = False,
    ) -> Any:
        """Float32 logits of the last position, or of every position ([rows, len, vocab])."""
        kwargs: dict[str, Any] = {self.cache_kwarg: cache}
        if any(adapter is not None for adapter in adapters):
            kwargs["adapter_names"] = [adapter or BASE_ADAPTER for adapter in adapters]
        out = self.module(
            input_ids=input_ids,
            attention_mask=attention,
            position_ids=positions,
            use_cache=True,
            logits_to_keep=0 if every_position else 1,
            **kwargs,
        )
        return out.logits.float() if every_position else out.logits[:, -1, :].float()

    def _finished(self, live: _Live) -> bool:
        tokens = live.tokens
        row = live.row
        if (row.stop_at_eos and tokens[-1] in self.chat.eos_token_ids) or (
            tokens[-1] in row.stop_token_ids
        ):
            live.finish = "stop"
            return True
        stops = live.row.params.stop
        if stops:
            # A stop string of c characters spans at most 4c byte-level tokens.
            window = 4 * max(len(stop) for stop in stops) + 4
            if first_stop(self.chat.decode(tokens[-window:]), stops) is not None:
                live.finish = "stop"
                return True
        if len(tokens) >= live.budget:
            live.finish = "length"
            return True
        return False


def _sample_of(live: _Live) -> Sample:
    return Sample(
        token_ids=tuple(live.tokens),
        logprobs=tuple(live.logprobs),
        top_logprobs=tuple(live.tops),
        finish_reason="stop" if live.finish == "stop" else "length",
        prompt_logprobs=live.prompt_logprobs,
    )


def _plain_layers(cache: Any) -> list[Any] | None:
    """The cache's layers when each holds plain key/value tensors of shape
    [batch, heads, tokens, head_dim] (which rows can be cut from and added to), else None."""
    try:
        from transformers.cache_utils import DynamicLayer
    except ImportError:  # a transformers without per-layer caches
        return None
    layers = list(getattr(cache, "layers", None) or [])
    if not layers or any(
        type(layer) is not DynamicLayer or not getattr(layer, "is_initialized", False)
        for layer in layers
    ):
        return None
    return layers
