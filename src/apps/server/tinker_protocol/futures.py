"""The tinker emulator's promises: how training, saving and sampling requests are answered.

Every such request becomes a promise: the POST answers at once with a `request_id`, the work
runs on the one compute thread, and `retrieve_future` long-polls for the result (`try_again`
after `long_poll_s`). Requests on one training run run in `seq_id` order (`RequestOrder`), as
on the service: the SDK may send a later request before an earlier one's POST returns. The
last `MAX_KEPT_RESULTS` promises are kept; older finished ones are forgotten.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import attrs

from .errors import HttpError, UserError
from .wire import Reply, failure

logger = logging.getLogger(__name__)

MAX_KEPT_RESULTS = 4096

Work = Callable[[], Reply]
"""What a request does on the compute thread; a UserError it raises fails it as the user's."""


@attrs.define(eq=False)
class Promise:
    done: threading.Event = attrs.Factory(threading.Event)
    reply: Reply | None = None


@attrs.define(eq=False)
class RequestOrder:
    """One training run's requests in `seq_id` order: the next to run, those that arrived
    before their turn, and when the last one arrived."""

    next_seq: int = 1
    pending: dict[int, tuple[Work, Promise]] = attrs.Factory(dict)
    lock: threading.Lock = attrs.Factory(threading.Lock)
    last_request: float = attrs.Factory(time.time)


class Futures:
    """The promises of one emulator and the one compute thread that resolves them."""

    def __init__(self, long_poll_s: float) -> None:
        self.long_poll_s = long_poll_s
        self._compute = ThreadPoolExecutor(1, thread_name_prefix="tinker-emulator-compute")
        self._lock = threading.Lock()
        self._promises: OrderedDict[str, Promise] = OrderedDict()

    def close(self) -> None:
        """Finish the running work, drop the queued work, fail what is still pending."""
        self._compute.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            for promise in self._promises.values():
                if not promise.done.is_set():
                    promise.reply = failure("the tinker emulator stopped", "server")
                    promise.done.set()

    def submit(self, work: Work) -> str:
        """Run `work` on the compute thread; its request id."""
        request_id, promise = self._promise()
        self._run(work, promise)
        return request_id

    def ordered(self, order: RequestOrder, seq_id: object, work: Work, *, model_id: str) -> str:
        """Queue `work` as request `seq_id` of model `model_id`; requests run in seq_id order."""
        if isinstance(seq_id, bool) or not isinstance(seq_id, int):
            raise HttpError(400, f"seq_id must be an integer, got {seq_id!r}")
        request_id, promise = self._promise()
        with order.lock:
            if seq_id < order.next_seq or seq_id in order.pending:
                raise HttpError(400, f"seq_id {seq_id} of model {model_id} was already used")
            order.pending[seq_id] = (work, promise)
            order.last_request = time.time()
            while order.next_seq in order.pending:
                queued, queued_promise = order.pending.pop(order.next_seq)
                self._run(queued, queued_promise)
                order.next_seq += 1
        return request_id

    def retrieve(self, body: dict[str, Any]) -> Reply:
        """`retrieve_future`: the result, or `try_again` after `long_poll_s`."""
        request_id = str(body.get("request_id"))
        promise = self._promises.get(request_id)
        if promise is None:
            raise HttpError(404, f"unknown request_id {request_id!r}")
        if not promise.done.wait(self.long_poll_s):
            return Reply.json(
                {"type": "try_again", "request_id": request_id, "queue_state": "active"}
            )
        assert promise.reply is not None
        return promise.reply

    def _promise(self) -> tuple[str, Promise]:
        request_id = str(uuid.uuid4())
        promise = Promise()
        with self._lock:
            self._promises[request_id] = promise
            while len(self._promises) > MAX_KEPT_RESULTS:
                oldest = next(iter(self._promises))
                if not self._promises[oldest].done.is_set():
                    break
                del self._promises[oldest]
        return request_id, promise

    def _run(self, work: Work, promise: Promise) -> None:
        self._compute.submit(_resolve, work, promise)


def _resolve(work: Work, promise: Promise) -> None:
    try:
        promise.reply = work()
    except UserError as exc:
        promise.reply = failure(str(exc), "user")
    except Exception as exc:
        logger.exception("tinker emulator request failed")
        promise.reply = failure(f"{type(exc).__name__}: {exc}", "server")
    finally:
        promise.done.set()
