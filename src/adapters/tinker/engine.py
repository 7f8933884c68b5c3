"""TinkerSamplingEngine: the shared inference server's engine, sampling through Tinker.

Prompts are rendered locally with the base model's Hugging Face tokenizer and chat template
(the same rendering the torch engine does), so the token ids the server hands back are the ones
Tinker sampled from. Each served name maps to a tinker `SamplingClient` (one per checkpoint's
sampler weights); names are added by the backend as steps are saved.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from ...core.errors import BackendError, InvalidInputError
from ..inference.chat import ChatTokenizer
from ..inference.engine import FinishReason, Sample, SamplingParams, UnknownModelError
from ..inference.served_names import ServedNames
from .clients import SamplingClientLike, call

if TYPE_CHECKING:
    from ..inference.engine import ServingEngine

UNBOUNDED_CONTEXT = 1 << 30


class TinkerSamplingEngine(ServedNames[SamplingClientLike]):
    """Serve names backed by tinker sampling clients; `await start()` loads the tokenizer."""

    def __init__(
        self,
        tokenizer: str,
        *,
        timeout_s: float | None = None,
        open_sampler: Callable[[str], Awaitable[SamplingClientLike]] | None = None,
        chat: ChatTokenizer | None = None,
    ) -> None:
        self.tokenizer_source = tokenizer
        self.timeout_s = timeout_s
        self._open_sampler = open_sampler
        # A tokenizer already loaded (engines of one base model may share it: it only renders)
        self._chat: ChatTokenizer | None = chat
        self._served: dict[str, SamplingClientLike] = {}
        self._aliases: dict[str, str] = {}
        # The service knows the model's context and rejects longer prompts itself.
        self._context_length = UNBOUNDED_CONTEXT
        self._closed = False

    async def start(self) -> None:
        if self._chat is None:
            self._chat = await asyncio.to_thread(ChatTokenizer.load, self.tokenizer_source)

    async def close(self) -> None:
        self._closed = True
        self._served.clear()
        self._aliases.clear()

    # names -------------------------------------------------------------------------------

    async def load(self, name: str, source: str | None, /) -> None:
        """Serve `name` from the sampler weights at `source` (a `tinker://` path)."""
        if source is None or self._open_sampler is None:
            raise InvalidInputError(
                f"{name!r}: a Tinker engine serves saved sampler weights; give their path"
            )
        self.serve(name, await self._open_sampler(source))

    def serve(self, name: str, client: SamplingClientLike) -> None:
        """Serve `name` from `client` (replacing what it served)."""
        self._aliases.pop(name, None)
        self._served[name] = client

    def alias(self, name: str, target: str) -> None:
        """Point `name` at `target`; unlike the local engines, a name that served a client
        itself may be re-pointed (the backend moves the latest name from step to step)."""
        resolved = self._aliases.get(target, target)
        if resolved not in self._served:
            raise UnknownModelError(target, self.served_models())
        self._served.pop(name, None)
        self._aliases[name] = resolved

    async def unload(self, name: str, /) -> None:
        self._served.pop(name, None)
        self._aliases.pop(name, None)
        self._forget_aliases_of(name)

    # sampling ----------------------------------------------------------------------------

    async def sample(
        self, model: str, prompt_token_ids: Sequence[int], n: int, params: SamplingParams
    ) -> list[Sample]:
        from tinker import types

        self._admit(n)
        client = self._resolve(model)
        prompt = self._chat_for(model).check_prompt(prompt_token_ids, self._context_length)
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

    async def score(self, model: str, token_ids: Sequence[int]) -> list[float | None]:
        """The served weights' logprob of each token given the ones before it (None for the
        first): the raw distribution, as `Sample.logprobs` are."""
        from tinker import types

        self._admit(1)
        client = self._resolve(model)
        tokens = self._chat_for(model).check_prompt(token_ids, self._context_length)
        if len(tokens) < 2:
            raise InvalidInputError("scoring needs at least two tokens (the first has no logprob)")
        scored = await call(
            f"scoring tokens with {model!r}",
            self.timeout_s,
            client.compute_logprobs,
            types.ModelInput.from_ints(tokens),
        )
        if len(scored) != len(tokens):
            raise BackendError(
                f"Tinker scored {len(scored)} of {len(tokens)} tokens with {model!r}"
            )
        return [None if value is None else float(value) for value in scored]


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
    _fits: type[ServingEngine] = TinkerSamplingEngine
