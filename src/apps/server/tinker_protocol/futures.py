"""The tinker emulator's promises: how training, saving and sampling requests are answered.

Every such request becomes a promise: the POST answers at once with a `request_id`, the work
runs on the one compute thread, and `retrieve_future` long-polls for the result (`try_again`
after `long_poll_s`). Requests on one training run run in `seq_id` order (`RequestOrder`), as
on the service: the SDK may send a later request before an earlier one's POST returns. The
last `MAX_KEPT_RESULTS` promises are kept; older finished ones are forgotten.

The compute thread is shared fairly: each training run (and sampling) has a lane of its own,
and the thread takes one request from each lane with work in turn, so a run that queued 50
forward_backwards delays another run's one request by one request, not by 50. When the
request whose turn it is may share a pass with the requests at the head of other lanes
(`Batchable`, equal keys: forward_backwards of runs on one base, batched.py), they run as
one, up to `MAX_BATCH` of them, and those lanes count as having had their turn; a lane's
requests still run one after another, in order.

A step's compute is short next to the time a client takes between its requests (an answer's
round trip, its own work), so few requests would be waiting together by chance. When the
request whose turn it is may be batched and other lanes are active (they put a request of the
same key in the last `ACTIVE_S`) but have nothing queued, the thread waits up to
`batch_window_s` for their next requests, which then join the pass. It waits for no one when
its lane is the only active one, and stops waiting as soon as every active lane has a request
queued; 0 turns the window off.

Promises live in memory only: a request id carries the id of the server's life that made it
(`boot_id`), and a restarted server answers one of an earlier life with 410, which the SDK
raises as its retryable error (`RetryableException`), never as a user error or as another
request's result. Its work is lost with the process; a training run resumes from its last
saved state. Requests a stop dropped before they ran are answered the same way.
"""

from __future__ import annotations

import logging
import re
import secrets
import threading
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable
from typing import Any

import attrs

from .errors import HttpError, UserError
from .store import hold_point
from .wire import Reply, failure

logger = logging.getLogger(__name__)

MAX_KEPT_RESULTS = 4096
MAX_BATCH = 8
BATCH_WINDOW_S = 0.01  # how long a batchable request waits for active runs to join it
ACTIVE_S = 1.0  # a lane that put a batchable request this recently is active
SAMPLING_LANE = "sampling"
_REQUEST_ID = re.compile(r"([0-9a-f]{12})\.[0-9a-f]{32}")  # <boot id>.<uuid4 hex>

Work = Callable[[], Reply]
"""What a request does on the compute thread; a UserError it raises fails it as the user's."""


@attrs.frozen
class Batchable:
    """A request that may run in one call with others of the same `key`: `run_many` takes
    their `item`s and answers each, in order. If it raises a UserError (before it changed
    anything), each request runs alone instead, so its error is its own."""

    key: Hashable
    item: Any
    run_many: Callable[[list[Any]], list[Reply]]


Queued = tuple[Work, "Promise", Batchable | None]


@attrs.define(eq=False)
class Promise:
    done: threading.Event = attrs.Factory(threading.Event)
    reply: Reply | None = None


@attrs.define(eq=False)
class RequestOrder:
    """One training run's requests in `seq_id` order: the next to run, those that arrived
    before their turn, and when the last one arrived."""

    next_seq: int = 1
    pending: dict[int, Queued] = attrs.Factory(dict)
    lock: threading.Lock = attrs.Factory(threading.Lock)
    last_request: float = attrs.Factory(time.time)


class Futures:
    """The promises of one emulator and the one compute thread that resolves them."""

    def __init__(self, long_poll_s: float, *, batch_window_s: float = BATCH_WINDOW_S) -> None:
        self.long_poll_s = long_poll_s
        self.boot_id = secrets.token_hex(6)
        self._compute = FairQueue("tinker-emulator-compute", batch_window_s=batch_window_s)
        self._lock = threading.Lock()
        self._promises: OrderedDict[str, Promise] = OrderedDict()

    def close(self) -> None:
        """Finish the running work, drop the queued work; what never ran is answered as the
        SDK's retryable error (410), as after a restart."""
        self._compute.close()
        with self._lock:
            for request_id, promise in self._promises.items():
                if not promise.done.is_set():
                    promise.reply = _gone(request_id, "the server stopped before it ran")
                    promise.done.set()

    def submit(self, work: Work, *, lane: Hashable = SAMPLING_LANE) -> str:
        """Run `work` on the compute thread, in its `lane`'s turn; its request id."""
        request_id, promise = self._promise()
        self._compute.put(lane, work, promise)
        return request_id

    def ordered(
        self,
        order: RequestOrder,
        seq_id: object,
        work: Work,
        *,
        model_id: str,
        batch: Batchable | None = None,
    ) -> str:
        """Queue `work` as request `seq_id` of model `model_id`; requests run in seq_id order."""
        if isinstance(seq_id, bool) or not isinstance(seq_id, int):
            raise HttpError(400, f"seq_id must be an integer, got {seq_id!r}")
        request_id, promise = self._promise()
        with order.lock:
            if seq_id < order.next_seq or seq_id in order.pending:
                raise HttpError(400, f"seq_id {seq_id} of model {model_id} was already used")
            order.pending[seq_id] = (work, promise, batch)
            order.last_request = time.time()
            while order.next_seq in order.pending:
                queued, queued_promise, queued_batch = order.pending.pop(order.next_seq)
                self._compute.put(("run", model_id), queued, queued_promise, queued_batch)
                order.next_seq += 1
        return request_id

    def retrieve(self, body: dict[str, Any]) -> Reply:
        """`retrieve_future`: the result, or `try_again` after `long_poll_s`."""
        request_id = str(body.get("request_id"))
        promise = self._promises.get(request_id)
        if promise is None:
            earlier = _REQUEST_ID.fullmatch(request_id)
            if earlier is not None and earlier.group(1) != self.boot_id:
                raise HttpError(410, _gone_text(request_id, "the server restarted since"))
            raise HttpError(404, f"unknown request_id {request_id!r}")
        if not promise.done.wait(self.long_poll_s):
            return Reply.json(
                {"type": "try_again", "request_id": request_id, "queue_state": "active"}
            )
        assert promise.reply is not None
        return promise.reply

    def _promise(self) -> tuple[str, Promise]:
        request_id = f"{self.boot_id}.{uuid.uuid4().hex}"
        promise = Promise()
        with self._lock:
            self._promises[request_id] = promise
            while len(self._promises) > MAX_KEPT_RESULTS:
                oldest = next(iter(self._promises))
                if not self._promises[oldest].done.is_set():
                    break
                del self._promises[oldest]
        return request_id, promise


class FairQueue:
    """One compute thread over lanes of queued work: each lane's work runs in the order it
    was put, and the lanes with work take turns, one item each (round-robin)."""

    def __init__(self, name: str, *, batch_window_s: float = 0.0) -> None:
        if batch_window_s < 0:
            raise ValueError(f"batch_window_s must be 0 or more, got {batch_window_s}")
        self._name = name
        self._window_s = batch_window_s
        self._wake = threading.Condition()
        self._lanes: OrderedDict[Hashable, deque[Queued]] = OrderedDict()
        # lane -> (the key of its last batchable request, when it was put: monotonic)
        self._batched: dict[Hashable, tuple[Hashable, float]] = {}
        self._thread: threading.Thread | None = None
        self._closed = False

    def put(
        self, lane: Hashable, work: Work, promise: Promise, batch: Batchable | None = None
    ) -> None:
        with self._wake:
            if self._closed:
                promise.reply = failure("the tinker emulator stopped", "server")
                promise.done.set()
                return
            self._lanes.setdefault(lane, deque()).append((work, promise, batch))
            if batch is not None:
                self._batched[lane] = (batch.key, time.monotonic())
            if self._thread is None:  # started on first use: it takes torch's settings then
                self._thread = threading.Thread(target=self._serve, name=self._name, daemon=True)
                self._thread.start()
            self._wake.notify()

    def close(self) -> None:
        """Let the running item finish and drop the queued ones (their promises stay
        pending, for the caller to fail)."""
        with self._wake:
            self._closed = True
            self._lanes.clear()
            self._wake.notify()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _next(self) -> list[Queued] | None:
        """The next lane's first item, and the first items of the lanes after it that may
        run with it (all those lanes to the back of the line)."""
        with self._wake:
            while not self._lanes and not self._closed:
                self._wake.wait()
            if self._closed:
                return None
            first = next(iter(self._lanes))
            head = self._lanes[first][0][2]
            taken = [first]
            if head is not None:
                if not self._await_active(first, head.key):
                    return None  # closed while it waited
                taken += self._joining(first, head.key)
            items = []
            for lane in taken:
                queue = self._lanes.pop(lane)
                items.append(queue.popleft())
                if queue:  # back of the line: every other lane with work goes first
                    self._lanes[lane] = queue
            return items

    def _joining(self, first: Hashable, key: Hashable) -> list[Hashable]:
        """The lanes after `first` whose head may share its pass (up to MAX_BATCH in all)."""
        joining: list[Hashable] = []
        for lane, queue in self._lanes.items():
            if len(joining) == MAX_BATCH - 1:
                break
            other = queue[0][2]
            if lane != first and other is not None and other.key == key:
                joining.append(lane)
        return joining

    def _await_active(self, first: Hashable, key: Hashable) -> bool:
        """Hold (the lock released) up to the batch window while a lane other than `first`
        that is active for `key` has nothing queued; at once when there is none. False when
        the queue closed meanwhile."""
        if self._window_s <= 0:
            return True
        start = time.monotonic()
        deadline = start + self._window_s
        for lane in [lane for lane, (_, last) in self._batched.items() if start - last >= ACTIVE_S]:
            del self._batched[lane]  # long quiet (or gone): forgotten, so the map stays small
        waited = False
        while not self._closed and len(self._joining(first, key)) < MAX_BATCH - 1:
            now = time.monotonic()
            idle = [
                lane
                for lane, (last_key, last) in self._batched.items()
                if lane not in self._lanes and last_key == key and now - last < ACTIVE_S
            ]
            if not idle or now >= deadline:
                break
            if not waited:
                waited = True
                logger.debug("waiting for %d active runs to join a pass", len(idle))
            self._wake.wait(deadline - now)
        if waited:
            logger.debug(
                "waited %.1f ms; %d runs join the pass",
                (time.monotonic() - start) * 1000,
                len(self._joining(first, key)),
            )
        return not self._closed

    def _serve(self) -> None:
        while (items := self._next()) is not None:
            if len(items) == 1:
                _resolve(items[0][0], items[0][1])
            else:
                _resolve_many(items)


def _resolve_many(items: list[Queued]) -> None:
    batches = [batch for _, _, batch in items if batch is not None]
    logger.debug("%d requests of different runs in one pass", len(batches))
    try:
        replies = batches[0].run_many([batch.item for batch in batches])
    except UserError:
        for work, promise, _ in items:
            _resolve(work, promise)
        return
    except Exception as exc:
        logger.exception("tinker emulator batched request failed")
        replies = [failure(f"{type(exc).__name__}: {exc}", "server")] * len(items)
    for (_, promise, _), reply in zip(items, replies):
        hold_point("answer")
        promise.reply = reply
        promise.done.set()


def _resolve(work: Work, promise: Promise) -> None:
    try:
        reply = work()
        hold_point("answer")
        promise.reply = reply
    except UserError as exc:
        promise.reply = failure(str(exc), "user")
    except Exception as exc:
        logger.exception("tinker emulator request failed")
        promise.reply = failure(f"{type(exc).__name__}: {exc}", "server")
    finally:
        promise.done.set()


def _gone_text(request_id: str, why: str) -> str:
    return (
        f"request {request_id} is lost: {why}; send it again (a training run goes on from its "
        "last saved state)"
    )


def _gone(request_id: str, why: str) -> Reply:
    return Reply.json({"detail": _gone_text(request_id, why)}, 410)
