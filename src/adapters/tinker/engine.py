"""TinkerSamplingEngine: the shared inference server's engine, sampling through Tinker.

Prompts are rendered locally with the base model's Hugging Face tokenizer and chat template
(the same rendering the torch engine does), so the token ids the server hands back are the ones
Tinker sampled from. Each served name maps to a tinker `SamplingClient` (one per checkpoint's
sampler weights); names are added by the backend as steps are saved.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ...core.errors import BackendError, InvalidInputError
from ..inference._chat import ChatTokenizer
from ..inference.engine import FinishReason, Sample, SamplingParams, UnknownModelError
from .clients import SamplingClientLike, call

if TYPE_CHECKING:
    from ..inference.engine import SamplingEngine

MAX_SAMPLES_PER_REQUEST = 256
UNBOUNDED_CONTEXT = 1 << 30


class TinkerSamplingEngine:
    """Serve names backed by tinker sampling clients; `await start()` loads the tokenizer."""

    def __init__(self, tokenizer: str, *, timeout_s: float | None = None) -> None:
        self.tokenizer_source = tokenizer
        self.timeout_s = timeout_s
        self._chat: ChatTokenizer | None = None
        self._clients: dict[str, SamplingClientLike] = {}
        self._aliases: dict[str, str] = {}
        # The service knows the model's context and rejects longer prompts itself.
        self._context_length = UNBOUNDED_CONTEXT
        self._closed = False

    async def start(self) -> None:
        if self._chat is None:
            self._chat = await asyncio.to_thread(ChatTokenizer.load, self.tokenizer_source)

    async def close(self) -> None:
        self._closed = True
        self._clients.clear()
        self._aliases.clear()

    # names -------------------------------------------------------------------------------

    def serve(self, name: str, client: SamplingClientLike) -> None:
        """Serve `name` from `client` (replacing what it served)."""
        self._aliases.pop(name, None)
        self._clients[name] = client

    def alias(self, name: str, target: str) -> None:
        resolved = self._aliases.get(target, target)
        if resolved not in self._clients:
            raise UnknownModelError(target, self.served_models())
        self._clients.pop(name, None)
        self._aliases[name] = resolved

    def unload(self, name: str) -> None:
        self._clients.pop(name, None)
        self._aliases.pop(name, None)
        for alias in [a for a, target in self._aliases.items() if target == name]:
            del self._aliases[alias]

    def is_served(self, name: str) -> bool:
        return name in self._clients or name in self._aliases

    def served_models(self) -> list[str]:
        return sorted([*self._clients, *self._aliases])

    # tokenizer ---------------------------------------------------------------------------

    def render_chat(
        self,
        model: str,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
    ) -> list[int]:
        self._resolve(model)
        return self._require_chat().render(messages, tools)

    def decode(self, model: str, token_ids: Sequence[int]) -> str:
        return self._require_chat().decode(token_ids)

    def token_text(self, model: str, token_id: int) -> str:
        return self._require_chat().token_text(token_id)

    # sampling ----------------------------------------------------------------------------

    async def sample(
        self, model: str, prompt_token_ids: Sequence[int], n: int, params: SamplingParams
    ) -> list[Sample]:
        from tinker import types

        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_SAMPLES_PER_REQUEST:
            raise InvalidInputError(f"n must be in 1..{MAX_SAMPLES_PER_REQUEST}, got {n!r}")
        if self._closed:
            raise BackendError("the Tinker sampling engine was closed")
        client = self._resolve(model)
        prompt = self._require_chat().check_prompt(prompt_token_ids, self._context_length)
        sampling = types.SamplingParams(
            max_tokens=params.max_tokens,
            seed=params.seed,
            temperature=params.temperature,
            top_p=params.top_p,
            stop=list(params.stop) or None,
        )
        response = await call(
            f"sampling {model!r}",
            self.timeout_s,
            client.sample,
            types.ModelInput.from_ints(prompt),
            n,
            sampling,
            topk_sample_logprobs=params.top_logprobs,
        )
        return [_sample(sequence, params.top_logprobs, model) for sequence in response.sequences]

    def _resolve(self, model: str) -> SamplingClientLike:
        client = self._clients.get(self._aliases.get(model, model))
        if client is None:
            raise UnknownModelError(model, self.served_models())
        return client

    def _require_chat(self) -> ChatTokenizer:
        if self._chat is None:
            raise BackendError("the Tinker sampling engine is not started; await start()")
        return self._chat


def _sample(sequence: Any, top_k: int, model: str) -> Sample:
    tokens = tuple(int(t) for t in sequence.tokens)
    logprobs = sequence.logprobs
    if logprobs is None or len(logprobs) != len(tokens):
        raise BackendError(f"Tinker returned no logprob per sampled token for {model!r}")
    tops: tuple[tuple[tuple[int, float], ...], ...] = tuple(() for _ in tokens)
    if top_k > 0 and sequence.topk_logprobs is not None:
        tops = tuple(
            tuple((int(t), float(v)) for t, v in (row or ())[:top_k])
            for row in sequence.topk_logprobs
        )
    reason: FinishReason = "length" if sequence.stop_reason == "length" else "stop"
    return Sample(
        token_ids=tokens,
        logprobs=tuple(float(v) for v in logprobs),
        top_logprobs=tops,
        finish_reason=reason,
    )


if TYPE_CHECKING:
    _fits: type[SamplingEngine] = TinkerSamplingEngine
