"""The Tinker protocol's compute thread serves training runs in turn: one run's long queue
does not starve another run's single request, and each run's requests keep their seq_id order.

The order is what the test's own work items record as they finish, not anything the queue
reports about itself."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator

import pytest

from arthex.apps.server.tinker_protocol.futures import Futures, RequestOrder, Work
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
