"""The Tinker protocol's compute thread serves training runs in turn: one run's long queue
does not starve another run's single request, and each run's requests keep their seq_id order.

The order is what the test's own work items record as they finish, not anything the queue
reports about itself."""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Iterator

import pytest

from arthex.apps.server.tinker_protocol.errors import UserError
from arthex.apps.server.tinker_protocol.futures import Batchable, Futures, RequestOrder, Work
from arthex.apps.server.tinker_protocol.wire import Reply


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
