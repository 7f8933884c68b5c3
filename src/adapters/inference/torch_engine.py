"""The built-in sampling engine: plain torch + transformers, on CPU or one GPU.

Concurrent `sample` calls are queued and, per served name, run as one left-padded batch with
a KV cache, on one worker thread so the event loop stays free for HTTP and rollouts. A batch
starts as soon as the previous one ends (after a few milliseconds' window to let concurrent
callers join), so under load every forward pass carries every waiting request.

Weights per served name:
- the base model (`checkpoint_dir=None`),
- a peft LoRA adapter directory (`adapter_config.json` + `adapter_model.safetensors`): all
  adapters share one base module through peft's multi-adapter support, so memory grows by
  the adapter size per step,
- a full-weights directory (`model.safetensors`, a whole-model state dict): one module per
  served name. That is meant for small models (the tiny test model trains fully); a big
  model should be trained and served as LoRA.

Reported logprobs follow engine.py: the raw distribution (temperature 1, no top-p).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import threading
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import attrs

from ...core.errors import BackendError, InvalidInputError
from ._chat import ChatTokenizer
from ._decoding import DecodeRow, generate_batch
from ._weights import ModelWeights, Weights
from .engine import Sample, SamplingEngine, SamplingParams, UnknownModelError

__all__ = ["TorchEngine"]

logger = logging.getLogger(__name__)

MAX_SAMPLES_PER_REQUEST = 256


@attrs.define(eq=False)
class _Request:
    weights: Weights
    name: str
    prompt: list[int]
    n: int
    params: SamplingParams
    future: asyncio.Future[list[Sample]]
    results: list[Sample | None] = attrs.Factory(list)
    remaining: int = 0


@attrs.define(eq=False)
class _Row:
    request: _Request
    index: int
    seed: int


class TorchEngine:
    """A SamplingEngine on transformers. Construct, then `await start()` (or let `load` do
    it). Batching runs on whichever event loop is calling; the models stay loaded across loops.

    `batches_run` and `rows_run` count generation batches and the sequences in them, so
    tests and benchmarks can see whether concurrent calls really shared a batch.
    """

    def __init__(
        self,
        base_model: str,
        *,
        device: str | None = None,
        dtype: str | None = None,
        max_batch_size: int = 32,
        batch_window_s: float = 0.005,
    ) -> None:
        if max_batch_size < 1:
            raise InvalidInputError(f"max_batch_size must be >= 1, got {max_batch_size}")
        if batch_window_s < 0:
            raise InvalidInputError(f"batch_window_s must be >= 0, got {batch_window_s}")
        self.base_model = str(base_model)
        self.max_batch_size = max_batch_size
        self.batch_window_s = batch_window_s
        self.batches_run = 0
        self.rows_run = 0
        self._store = ModelWeights(self.base_model, device=device, dtype=dtype)
        self._chat: ChatTokenizer | None = None  # for the event loop's thread
        self._worker_chat: ChatTokenizer | None = None  # for the worker thread
        self._weights: dict[str, Weights] = {}
        self._aliases: dict[str, str] = {}
        self._pending: list[_Request] = []
        self._wakeup: asyncio.Event | None = None
        self._scheduler: asyncio.Task[None] | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._start_lock: asyncio.Lock | None = None
        self._lock_loop: asyncio.AbstractEventLoop | None = None
        self._closing = threading.Event()
        self._closed = False

    # lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Load the tokenizer and the base model (on the worker thread) and start batching.

        The batching task lives on the running event loop; called again from another loop
        (a later `asyncio.run`), it moves batching there and keeps the loaded weights."""
        if self._closed:
            raise BackendError("this TorchEngine is closed; create a new one")
        if not self._loaded():
            loop = asyncio.get_running_loop()
            if self._start_lock is None or self._lock_loop is not loop:
                self._start_lock, self._lock_loop = asyncio.Lock(), loop
            async with self._start_lock:
                if not self._loaded():  # no other caller finished loading while we waited
                    executor = ThreadPoolExecutor(1, thread_name_prefix="arthex-torch-engine")
                    try:
                        await loop.run_in_executor(executor, self._load_base)
                    except BaseException:
                        executor.shutdown(wait=False)
                        raise
                    self._executor = executor
        self._ensure_scheduler()

    def _loaded(self) -> bool:
        return self._executor is not None

    def _ensure_scheduler(self) -> None:
        loop = asyncio.get_running_loop()
        task = self._scheduler
        if task is not None and not task.done() and task.get_loop() is loop:
            return
        # Requests queued on a finished loop can never be answered; their callers are gone.
        self._pending = [r for r in self._pending if r.future.get_loop() is loop]
        self._wakeup = asyncio.Event()
        self._scheduler = loop.create_task(self._schedule(), name="arthex-torch-engine")
        if self._pending:
            self._wakeup.set()

    async def close(self) -> None:
        """Fail what is still queued, stop batching, and release the models."""
        if self._closed:
            return
        self._closed = True
        self._closing.set()
        loop = asyncio.get_running_loop()
        task = self._scheduler
        if task is not None and not task.done() and task.get_loop() is loop:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for request in self._pending:
            if not request.future.done() and request.future.get_loop() is loop:
                request.future.set_exception(BackendError("the inference engine was closed"))
        self._pending.clear()
        if self._executor is not None:
            await asyncio.to_thread(self._executor.shutdown, wait=True)
        self._weights.clear()
        self._aliases.clear()
        self._store.release_all()

    # serving names -----------------------------------------------------------------------

    async def load(self, name: str, checkpoint_dir: str | None) -> None:
        """Serve `name` from the base model (None) or a checkpoint directory (full weights or
        a LoRA adapter). Loading over an existing name replaces it once the new weights are
        ready, so requests never see a gap."""
        _check_served_name(name)
        await self.start()
        weights = await self._in_worker(self._store.load, checkpoint_dir)
        previous = self._weights.get(name)
        self._aliases.pop(name, None)
        self._weights[name] = weights
        if previous is not None and previous is not weights:
            await self._retire(previous)

    def alias(self, name: str, target: str) -> None:
        """Make `name` serve whatever `target` serves now (e.g. "agent" -> "agent@3")."""
        _check_served_name(name)
        resolved = self._aliases.get(target, target)
        if resolved not in self._weights:
            raise UnknownModelError(target, self.served_models())
        if name in self._weights:
            raise InvalidInputError(
                f"{name!r} already serves loaded weights; unload it before using it as an alias"
            )
        if name == resolved:
            raise InvalidInputError(f"{name!r} cannot be an alias of itself")
        self._aliases[name] = resolved

    async def unload(self, name: str) -> None:
        """Stop serving `name`: new requests for it get UnknownModelError at once, requests
        already accepted still finish, then the memory is released. Unloading weights also
        drops the aliases that pointed at them."""
        if name in self._aliases:
            del self._aliases[name]
            return
        weights = self._weights.pop(name, None)
        if weights is None:
            raise UnknownModelError(name, self.served_models())
        for alias in [alias for alias, target in self._aliases.items() if target == name]:
            del self._aliases[alias]
        await self._retire(weights)

    def is_served(self, name: str) -> bool:
        return name in self._weights or name in self._aliases

    def served_models(self) -> list[str]:
        return sorted([*self._weights, *self._aliases])

    # tokenizer ---------------------------------------------------------------------------

    def render_chat(
        self,
        model: str,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
    ) -> list[int]:
        return self._chat_for(model).render(messages, tools)

    def decode(self, model: str, token_ids: Sequence[int]) -> str:
        return self._chat_for(model).decode(token_ids)

    def token_text(self, model: str, token_id: int) -> str:
        return self._chat_for(model).token_text(token_id)

    # sampling ----------------------------------------------------------------------------

    async def sample(
        self, model: str, prompt_token_ids: Sequence[int], n: int, params: SamplingParams
    ) -> list[Sample]:
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_SAMPLES_PER_REQUEST:
            raise InvalidInputError(f"n must be in 1..{MAX_SAMPLES_PER_REQUEST}, got {n!r}")
        if self._closed:
            raise BackendError("the inference engine was closed")
        weights = self._resolve(model)
        assert self._chat is not None  # a served name implies a loaded engine
        prompt = self._chat.check_prompt(prompt_token_ids, self._store.context_length)
        self._ensure_scheduler()
        assert self._wakeup is not None
        future: asyncio.Future[list[Sample]] = asyncio.get_running_loop().create_future()
        request = _Request(weights, model, prompt, n, params, future, [None] * n, n)
        self._pending.append(request)
        self._wakeup.set()
        weights.inflight += 1
        try:
            return await future
        finally:
            weights.inflight -= 1
            if weights.inflight == 0 and weights.drained is not None:
                weights.drained.set()

    # internals: event-loop side ----------------------------------------------------------

    def _resolve(self, model: str) -> Weights:
        weights = self._weights.get(self._aliases.get(model, model))
        if weights is None:
            raise UnknownModelError(model, self.served_models())
        return weights

    def _chat_for(self, model: str) -> ChatTokenizer:
        self._resolve(model)
        assert self._chat is not None
        return self._chat

    async def _in_worker(self, function: Any, *args: Any) -> Any:
        assert self._executor is not None
        return await asyncio.get_running_loop().run_in_executor(self._executor, function, *args)

    async def _retire(self, weights: Weights) -> None:
        if weights.inflight:
            weights.drained = asyncio.Event()
            await weights.drained.wait()
        weights.loaded = False
        if weights.kind != "base":
            await self._in_worker(self._store.release, weights)

    async def _schedule(self) -> None:
        assert self._wakeup is not None
        while True:
            await self._wakeup.wait()
            # Let callers that are submitting at this moment join the same batch.
            await asyncio.sleep(self.batch_window_s)
            self._wakeup.clear()
            pending, self._pending = self._pending, []
            by_weights: dict[int, list[_Row]] = {}
            for request in pending:
                if request.future.done():  # the caller gave up
                    continue
                rows = by_weights.setdefault(id(request.weights), [])
                rows.extend(_rows_of(request))
            for rows in by_weights.values():
                for start in range(0, len(rows), self.max_batch_size):
                    try:
                        await self._run_batch(rows[start : start + self.max_batch_size])
                    except Exception as exc:  # a bug here must not stall every later request
                        logger.exception("the torch engine failed to run a batch")
                        _fail(rows[start : start + self.max_batch_size], exc)

    async def _run_batch(self, rows: list[_Row]) -> None:
        live = [row for row in rows if not row.request.future.done()]
        if not live:
            return
        try:
            samples: list[Sample] = await self._in_worker(self._generate, live)
        except Exception as exc:
            _fail(live, exc)
            return
        self.batches_run += 1
        self.rows_run += len(live)
        for row, sample in zip(live, samples):
            request = row.request
            request.results[row.index] = sample
            request.remaining -= 1
            if request.remaining == 0 and not request.future.done():
                request.future.set_result([s for s in request.results if s is not None])

    # internals: worker-thread side -------------------------------------------------------

    def _generate(self, rows: list[_Row]) -> list[Sample]:
        import torch

        assert self._worker_chat is not None
        decode_rows = [DecodeRow(row.request.prompt, row.request.params, row.seed) for row in rows]
        weights = rows[0].request.weights
        if not weights.loaded:
            raise UnknownModelError(rows[0].request.name, self.served_models())
        with torch.inference_mode(), self._store.module_for(weights) as module:
            return generate_batch(
                module,
                self._worker_chat,
                decode_rows,
                device=self._store.device,
                context_length=self._store.context_length,
                cache_kwarg=self._store.cache_kwarg,
                cancelled=self._closing,
            )

    def _load_base(self) -> None:
        chat = self._store.load_base()
        self._worker_chat = chat.clone()
        self._chat = chat


def _fail(rows: list[_Row], exc: Exception) -> None:
    for request in {id(row.request): row.request for row in rows}.values():
        if not request.future.done():
            request.future.set_exception(exc)


def _rows_of(request: _Request) -> Iterator[_Row]:
    seed = request.params.seed
    for index in range(request.n):
        row_seed = secrets.randbits(63) if seed is None else (seed * 1_000_003 + index) % (1 << 63)
        yield _Row(request, index, row_seed)


def _check_served_name(name: str) -> None:
    if not isinstance(name, str) or not name or len(name) > 256 or not name.isprintable():
        raise InvalidInputError(
            f"a served model name must be a printable, non-empty string, got {name!r}"
        )


if TYPE_CHECKING:
    _fits: type[SamplingEngine] = TorchEngine
