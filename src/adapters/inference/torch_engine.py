"""The built-in sampling engine: plain torch + transformers, on CPU or one GPU.

Concurrent `sample` calls are queued and, per served name, run as one left-padded batch with
a KV cache, on one worker thread so the event loop stays free for HTTP and rollouts. A batch
starts after a few milliseconds' window that lets concurrent callers join; requests that
arrive while it runs join it between two decode steps (up to `max_batch_size` rows), and
each one is answered as soon as its own rows finish (see decoding.py). Rows for another
served name wait until the running batch drains.

Weights per served name:
- the base model (`checkpoint_dir=None`),
- a peft LoRA adapter directory (`adapter_config.json` + `adapter_model.safetensors`): all
  adapters share one base module through peft's multi-adapter support, so memory grows by
  the adapter size per step,
- a full-weights directory (`model.safetensors`, a whole-model state dict): one module per
  served name. That is meant for small models (the tiny test model trains fully); a big
  model should be trained and served as LoRA.

Reported logprobs follow engine.py: the raw distribution (temperature 1, no top-p).

On CPU the worker thread runs torch with one core fewer than the process may use (at least
one): the event loop that serves HTTP and rollouts needs a core of its own, and torch's
OpenMP threads spin-wait for each other, so when they share their cores with a busy event
loop (or with other processes) every decode step stalls on a thread that is not running.
Measured on 2 cores under load, that made a batch 10 to 60 times slower. Other threads of
the process keep torch's own setting.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import attrs

from ...core.errors import BackendError, InvalidInputError
from ._weights import ModelWeights, Weights
from .chat import ChatTokenizer
from .decoding import DecodeRow, row_seed, run_session
from .engine import Sample, SamplingParams, ServingEngine, UnknownModelError
from .served_names import ServedNames

__all__ = ["TorchEngine"]

logger = logging.getLogger(__name__)

RETURN_WAIT = 10  # batch windows a batch waits at most for callers to come back


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
    arrived: float = attrs.Factory(time.monotonic)

    def decode_row(self) -> DecodeRow:
        return DecodeRow(self.request.prompt, self.request.params, self.seed)


class TorchEngine(ServedNames[Weights]):
    """A SamplingEngine on transformers. Construct, then `await start()` (or let `load` do
    it). Batching runs on whichever event loop is calling; the models stay loaded across loops.

    `batches_run` and `rows_run` count the groups of rows that started generating together
    and the rows in them; `steps_run` and `tokens_run` count decode steps and the tokens
    they drew. Tests and benchmarks read them to see whether concurrent calls really shared
    a batch (`tokens_run / steps_run` is the mean batch a step ran).
    `join_wait_s` bounds how long a request waits before joining a running batch (see
    `_take`). `cpu_threads` is torch's intra-op thread count for the worker on CPU (default: the
    usable cores less one, at least one; see the module docstring).
    """

    def __init__(
        self,
        base_model: str,
        *,
        device: str | None = None,
        dtype: str | None = None,
        max_batch_size: int = 32,
        batch_window_s: float = 0.005,
        cpu_threads: int | None = None,
        join_wait_s: float = 0.25,
    ) -> None:
        if max_batch_size < 1:
            raise InvalidInputError(f"max_batch_size must be >= 1, got {max_batch_size}")
        if batch_window_s < 0:
            raise InvalidInputError(f"batch_window_s must be >= 0, got {batch_window_s}")
        if join_wait_s < 0:
            raise InvalidInputError(f"join_wait_s must be >= 0, got {join_wait_s}")
        if cpu_threads is not None and (
            isinstance(cpu_threads, bool) or not isinstance(cpu_threads, int) or cpu_threads < 1
        ):
            raise InvalidInputError(f"cpu_threads must be an integer >= 1, got {cpu_threads!r}")
        self.base_model = str(base_model)
        self.max_batch_size = max_batch_size
        self.batch_window_s = batch_window_s
        self.join_wait_s = join_wait_s
        self.cpu_threads = cpu_threads or _default_cpu_threads()
        self.batches_run = 0
        self.rows_run = 0
        self.steps_run = 0
        self.tokens_run = 0
        self._store = ModelWeights(self.base_model, device=device, dtype=dtype)
        self._chat: ChatTokenizer | None = None  # for the event loop's thread
        self._worker_chat: ChatTokenizer | None = None  # for the worker thread
        self._served: dict[str, Weights] = {}
        self._aliases: dict[str, str] = {}
        # Rows waiting for a batch: appended on the event loop, taken by the scheduler and
        # (to join a running batch) by the worker thread, hence the lock.
        self._queue: list[_Row] = []
        self._queue_lock = threading.Lock()
        self._requests: set[_Request] = set()  # accepted and not yet answered
        self._returning = 0  # rows answered since the last batch started (see _start_delay)
        self._answered_at = 0.0
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
        self._requests = {r for r in self._requests if r.future.get_loop() is loop}
        with self._queue_lock:
            self._queue = [r for r in self._queue if r.request.future.get_loop() is loop]
            waiting = bool(self._queue)
        self._wakeup = asyncio.Event()
        self._scheduler = loop.create_task(self._schedule(), name="arthex-torch-engine")
        if waiting:
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
        for request in self._requests:
            if not request.future.done() and request.future.get_loop() is loop:
                request.future.set_exception(BackendError("the inference engine was closed"))
        self._requests.clear()
        with self._queue_lock:
            self._queue.clear()
        if self._executor is not None:
            await asyncio.to_thread(self._executor.shutdown, wait=True)
        self._served.clear()
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
        previous = self._served.get(name)
        self._aliases.pop(name, None)
        self._served[name] = weights
        if previous is not None and previous is not weights:
            await self._retire(previous)

    def alias(self, name: str, target: str) -> None:
        _check_served_name(name)
        super().alias(name, target)

    async def unload(self, name: str) -> None:
        """Stop serving `name`: new requests for it get UnknownModelError at once, requests
        already accepted still finish, then the memory is released. Unloading weights also
        drops the aliases that pointed at them."""
        if name in self._aliases:
            del self._aliases[name]
            return
        weights = self._served.pop(name, None)
        if weights is None:
            raise UnknownModelError(name, self.served_models())
        self._forget_aliases_of(name)
        await self._retire(weights)

    # sampling ----------------------------------------------------------------------------

    async def sample(
        self, model: str, prompt_token_ids: Sequence[int], n: int, params: SamplingParams
    ) -> list[Sample]:
        self._admit(n)
        weights = self._resolve(model)
        assert self._chat is not None  # a served name implies a loaded engine
        prompt = self._chat.check_prompt(prompt_token_ids, self._store.context_length)
        self._ensure_scheduler()
        assert self._wakeup is not None
        future: asyncio.Future[list[Sample]] = asyncio.get_running_loop().create_future()
        request = _Request(weights, model, prompt, n, params, future, [None] * n, n)
        rows = list(_rows_of(request))
        with self._queue_lock:
            self._queue.extend(rows)
        self._requests.add(request)
        self._wakeup.set()
        weights.inflight += 1
        try:
            return await future
        finally:
            self._requests.discard(request)
            weights.inflight -= 1
            if weights.inflight == 0 and weights.drained is not None:
                weights.drained.set()

    # internals: event-loop side ----------------------------------------------------------

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
        loop = asyncio.get_running_loop()
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while True:
                while (delay := self._start_delay()) > 0:
                    # Each arrival wakes us to look again: it may fill the batch, or extend
                    # the wait.
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wakeup.wait(), delay)
                    self._wakeup.clear()
                first = self._take(None, self.max_batch_size)
                if not first:
                    break
                self._returning = 0
                await self._run_session(loop, first)

    def _start_delay(self) -> float:
        """Seconds to wait before starting a batch.

        Callers answered by the last batch usually come back (an agent's next turn, a
        rollout worker's next episode), and behind the HTTP server they come back one round
        trip apart, not together. Starting with the first of them would leave the rest
        waiting through a whole batch, half empty; so a batch starts once all of them are
        back, or the batch is full, or `RETURN_WAIT` windows have passed since the last of
        them was answered (or since the oldest row arrived, when no batch ran since).
        Without such callers to wait for, it starts once no request has arrived for one
        batch window (callers submitting together land in one batch)."""
        with self._queue_lock:
            queued = len(self._queue)
            if not queued or queued >= self.max_batch_size:
                return 0.0
            oldest = min(row.arrived for row in self._queue)
            newest = max(row.arrived for row in self._queue)
        longest = max(oldest, self._answered_at) + RETURN_WAIT * self.batch_window_s
        if self._returning:
            due = longest if queued < self._returning else 0.0
        else:
            due = min(newest + self.batch_window_s, longest)
        return due - time.monotonic()

    async def _run_session(self, loop: asyncio.AbstractEventLoop, first: list[_Row]) -> None:
        taken = list(first)  # the worker appends the rows that join
        try:
            await self._in_worker(self._generate, loop, first, taken)
        except Exception as exc:
            if not isinstance(exc, BackendError | UnknownModelError):
                # A bug here must not stall every later request: log it, fail this batch.
                logger.exception("the torch engine failed to run a batch")
            _fail(taken, exc)

    def _take(
        self, weights: Weights | None, room: int, *, joining: int | None = None
    ) -> list[_Row]:
        """Up to `room` queued rows for `weights` (None: the oldest row's weights), oldest
        first, skipping rows whose caller gave up. Called on the event loop to start a batch,
        and on the worker to join a running batch of `joining` rows.

        Joining costs a prefill pass of its own and, worse, when a small model decodes in the
        same process as the HTTP server, a decode loop that runs while the event loop works
        through responses and requests slows both several times over: they take turns at the
        GIL at every torch call. So rows join only when they fill the room or have waited
        `join_wait_s`; otherwise they wait for the batch to drain, which under steady load
        keeps batches full and in step, and still bounds the wait behind a long generation.
        Nothing joins while another served name is next in line."""
        with self._queue_lock:
            queue = [row for row in self._queue if not row.request.future.done()]
            self._queue = queue
            if not queue:
                return []
            if weights is None:
                weights = queue[0].request.weights
            elif queue[0].request.weights is not weights:
                return []
            matching = [row for row in queue if row.request.weights is weights][:room]
            if not matching:
                return []
            waited = time.monotonic() - matching[0].arrived
            if joining is not None and len(matching) < room and waited < self.join_wait_s:
                return []
            chosen = {id(row) for row in matching}
            self._queue = [row for row in queue if id(row) not in chosen]
        self.batches_run += 1
        self.rows_run += len(matching)
        return matching

    def _deliver(self, row: _Row, sample: Sample) -> None:
        request = row.request
        if request.future.done():
            return
        request.results[row.index] = sample
        request.remaining -= 1
        if request.remaining == 0:
            request.future.set_result([s for s in request.results if s is not None])
            self._returning += request.n
            self._answered_at = time.monotonic()

    # internals: worker-thread side -------------------------------------------------------

    def _generate(
        self, loop: asyncio.AbstractEventLoop, first: list[_Row], taken: list[_Row]
    ) -> None:
        import torch

        assert self._worker_chat is not None
        weights = first[0].request.weights
        if not weights.loaded:
            raise UnknownModelError(first[0].request.name, self.served_models())
        feed = _Feed(self, loop, weights, taken)
        with torch.inference_mode(), self._store.module_for(weights) as module:
            run_session(
                module,
                self._worker_chat,
                feed,
                [(row, row.decode_row()) for row in first],
                device=self._store.device,
                context_length=self._store.context_length,
                cache_kwarg=self._store.cache_kwarg,
                cancelled=self._closing,
                max_batch_size=self.max_batch_size,
            )

    def _load_base(self) -> None:
        chat = self._store.load_base()
        if self._store.device.type == "cpu":
            _limit_torch_threads_here(self.cpu_threads)
        self._worker_chat = chat.clone()
        self._chat = chat


@attrs.define(eq=False)
class _Feed:
    """The worker's view of the engine during one batch (see decoding.RowFeed)."""

    engine: TorchEngine
    loop: asyncio.AbstractEventLoop
    weights: Weights
    taken: list[_Row]

    def take(self, room: int, live: int) -> list[tuple[Any, DecodeRow]]:
        rows = self.engine._take(self.weights, room, joining=live)
        self.taken.extend(rows)
        return [(row, row.decode_row()) for row in rows]

    def abandoned(self, handle: Any) -> bool:
        row: _Row = handle
        return row.request.future.done()

    def stepped(self, rows: int) -> None:
        self.engine.steps_run += 1
        self.engine.tokens_run += rows

    def finished(self, handle: Any, sample: Sample) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: its callers are gone
            self.loop.call_soon_threadsafe(self.engine._deliver, handle, sample)


def _default_cpu_threads() -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, cores - 1)


def _limit_torch_threads_here(threads: int) -> None:
    """Give the calling thread `threads` intra-op threads, and leave every other thread's
    setting as it was. torch keeps OpenMP's and MKL's thread counts per thread, but
    `set_num_threads` also stores the count as the default for threads that have not used
    torch yet; a short-lived thread puts that default back."""
    import torch

    default = torch.get_num_threads()
    if default == threads:
        return
    torch.set_num_threads(threads)
    restore = threading.Thread(target=torch.set_num_threads, args=(default,), daemon=True)
    restore.start()
    restore.join()


def _fail(rows: list[_Row], exc: Exception) -> None:
    for request in {id(row.request): row.request for row in rows}.values():
        if not request.future.done():
            request.future.set_exception(exc)


def _rows_of(request: _Request) -> Iterator[_Row]:
    seed = request.params.seed
    for index in range(request.n):
        yield _Row(request, index, row_seed(seed, index))


def _check_served_name(name: str) -> None:
    if not isinstance(name, str) or not name or len(name) > 256 or not name.isprintable():
        raise InvalidInputError(
            f"a served model name must be a printable, non-empty string, got {name!r}"
        )


if TYPE_CHECKING:
    _fits: type[ServingEngine] = TorchEngine
