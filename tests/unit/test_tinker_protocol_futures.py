"""The Tinker protocol's compute thread serves training runs in turn: one run's long queue
does not starve another run's single request, and each run's requests keep their seq_id order.

The order is what the test's own work items record as they finish, not anything the queue
reports about itself."""

from __future__ import annotations

import json
import logging
import random
import threading
from collections.abc import Iterator

import pytest

from arthex.apps.server.tinker_protocol import futures as futures_module
from arthex.apps.server.tinker_protocol.errors import UserError
from arthex.apps.server.tinker_protocol.futures import (
    BATCH_WINDOW_S,
    Batchable,
    Futures,
    RequestOrder,
    Work,
)
from arthex.apps.server.tinker_protocol.main import BATCH_WINDOW_ENV, window_from_env
from arthex.apps.server.tinker_protocol.wire import Reply
from arthex.core.errors import InvalidInputError


@pytest.fixture
def futures() -> Iterator[Futures]:
    running = Futures(long_poll_s=5.0)
    yield running
    running.close()


def recorder(log: list[str], name: str) -> Work:
    def work() -> Reply:
        log.append(name)
        return Reply.json({"done": name})

    return work


def wait_all(futures: Futures, ids: list[str]) -> list[object]:
    return [futures.retrieve({"request_id": request_id}) for request_id in ids]


def gate(futures: Futures) -> tuple[threading.Event, str]:
    """A request that holds the compute thread until released, so the rest queue up."""
    release, started = threading.Event(), threading.Event()

    def hold() -> Reply:
        started.set()
        release.wait(10)
        return Reply.json({})

    request_id = futures.submit(hold, lane="gate")
    assert started.wait(10)
    return release, request_id


def test_a_run_with_one_request_is_not_starved_by_a_run_with_fifty(futures: Futures) -> None:
    log: list[str] = []
    release, held = gate(futures)
    busy, quiet = RequestOrder(), RequestOrder()
    seqs = list(range(1, 51))
    random.Random(3).shuffle(seqs)  # the SDK may send later seq_ids first
    ids = [futures.ordered(busy, s, recorder(log, f"busy{s}"), model_id="busy") for s in seqs]
    ids.append(futures.ordered(quiet, 1, recorder(log, "quiet1"), model_id="quiet"))
    release.set()
    wait_all(futures, [held, *ids])
    assert len(log) == 51
    # Round-robin: the quiet run's request runs right after the busy run's first one.
    assert log.index("quiet1") == 1
    assert [name for name in log if name.startswith("busy")] == [f"busy{s}" for s in range(1, 51)]


def test_runs_with_work_take_turns(futures: Futures) -> None:
    log: list[str] = []
    release, held = gate(futures)
    orders = {name: RequestOrder() for name in "abc"}
    ids = []
    for name, count in (("a", 4), ("b", 2), ("c", 3)):
        for seq in range(1, count + 1):
            work = recorder(log, f"{name}{seq}")
            ids.append(futures.ordered(orders[name], seq, work, model_id=name))
    ids.append(futures.submit(recorder(log, "sample"), lane="sampler"))
    release.set()
    wait_all(futures, [held, *ids])
    assert log == ["a1", "b1", "c1", "sample", "a2", "b2", "c2", "a3", "c3", "a4"]


def batchable(log: list[str], key: str, name: str, *, fail: bool = False) -> Batchable:
    def run_many(items: list[str]) -> list[Reply]:
        if fail:
            raise UserError("one of them is bad")
        log.append("+".join(items))
        return [Reply.json({"done": item}) for item in items]

    return Batchable(key, name, run_many)


def test_waiting_batchable_heads_of_other_runs_share_one_call(futures: Futures) -> None:
    log: list[str] = []
    release, held = gate(futures)
    orders = {name: RequestOrder() for name in "abcd"}
    ids = []
    plan = [("a", 1, "k"), ("a", 2, "k"), ("b", 1, "k"), ("c", 1, "other"), ("d", 1, None)]
    plan += [("d", 2, "k")]
    for name, seq, key in plan:
        label = f"{name}{seq}"
        batch = batchable(log, key, label) if key is not None else None
        ids.append(
            futures.ordered(orders[name], seq, recorder(log, label), model_id=name, batch=batch)
        )
    release.set()
    replies = wait_all(futures, [held, *ids])
    # a1 takes b1 (same key, at the head of its lane) but not c1 (another key) nor d2 (behind
    # d1); a2 waits for a's next turn, after the lanes that did not run.
    assert log == ["a1+b1", "c1", "d1", "a2+d2"]
    done = [json.loads(r.body)["done"] for r in replies[1:] if isinstance(r, Reply)]
    assert done == ["a1", "a2", "b1", "c1", "d1", "d2"]


def test_a_batch_that_fails_as_the_users_runs_each_request_alone(futures: Futures) -> None:
    log: list[str] = []
    release, held = gate(futures)
    ids = []
    for name in "ab":
        batch = batchable(log, "k", f"{name}1", fail=True)
        work = recorder(log, f"{name}1")
        ids.append(futures.ordered(RequestOrder(), 1, work, model_id=name, batch=batch))
    release.set()
    wait_all(futures, [held, *ids])
    assert log == ["a1", "b1"]


class WindowWatch(logging.Handler):
    """Sets `waiting` when the compute thread starts waiting for active runs to join a pass
    (its debug log says so), so the test sends the late request only once it does."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.waiting = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("waiting for"):
            self.waiting.set()


@pytest.fixture
def window() -> Iterator[tuple[Futures, WindowWatch]]:
    """Futures whose batch window is long (a wait ends early once every active run has a
    request queued), and a watch on the compute thread's waits."""
    watch = WindowWatch()
    logger = futures_module.logger
    level = logger.level
    logger.setLevel(logging.DEBUG)
    logger.addHandler(watch)
    running = Futures(long_poll_s=5.0, batch_window_s=60.0)
    yield running, watch
    running.close()
    logger.removeHandler(watch)
    logger.setLevel(level)


def test_a_request_of_another_active_run_within_the_window_joins_the_pass(
    window: tuple[Futures, WindowWatch],
) -> None:
    futures, watch = window
    log: list[str] = []
    orders = {name: RequestOrder() for name in "ab"}

    def send(name: str, seq: int) -> str:
        label = f"{name}{seq}"
        batch = batchable(log, "k", label)
        return futures.ordered(orders[name], seq, recorder(log, label), model_id=name, batch=batch)

    release, held = gate(futures)  # a1 and b1 queue up and share a pass: both runs active
    ids = [send("a", 1), send("b", 1)]
    release.set()
    wait_all(futures, [held, *ids])
    assert log == ["a1+b1"] and not watch.waiting.is_set()
    first = send("a", 2)  # b has nothing queued: the thread waits for it
    assert watch.waiting.wait(10)
    second = send("b", 2)
    replies = wait_all(futures, [first, second])
    assert log[-1] == "a2+b2"
    assert [json.loads(r.body)["done"] for r in replies if isinstance(r, Reply)] == ["a2", "b2"]


def test_with_one_active_run_no_wait_happens(window: tuple[Futures, WindowWatch]) -> None:
    futures, watch = window
    log: list[str] = []
    alone, other = RequestOrder(), RequestOrder()
    # Another run was active, but with requests that cannot share this run's pass.
    wait_all(
        futures,
        [
            futures.ordered(
                other, 1, recorder(log, "o1"), model_id="o", batch=batchable(log, "x", "o1")
            ),
            futures.submit(recorder(log, "sample"), lane="sampler"),
        ],
    )
    for seq in (1, 2):
        label = f"a{seq}"
        request_id = futures.ordered(
            alone, seq, recorder(log, label), model_id="a", batch=batchable(log, "k", label)
        )
        reply = futures.retrieve({"request_id": request_id})
        assert isinstance(reply, Reply) and json.loads(reply.body) == {"done": label}
    assert not watch.waiting.is_set()
    assert log[-2:] == ["a1", "a2"]


def test_the_window_setting_is_milliseconds_and_bad_values_are_named() -> None:
    assert window_from_env({}) == BATCH_WINDOW_S
    assert window_from_env({BATCH_WINDOW_ENV: "0"}) == 0.0
    assert window_from_env({BATCH_WINDOW_ENV: " 25 "}) == 0.025
    for bad in ("-1", "fast", "nan", "5000"):
        with pytest.raises(InvalidInputError, match=BATCH_WINDOW_ENV):
            window_from_env({BATCH_WINDOW_ENV: bad})
