"""history.jsonl under SIGKILL: a writer killed at random moments, 100 times. No complete
row is ever lost, at most the last line is torn, and the next append repairs it.

Each round waits for a random number (1-4) of the writer's acknowledgements before the kill,
so progress is counted in events, not time: a busy machine slows the test, never fails it.
The kill still lands at a random point of the writer's loop (it keeps writing after an ack)."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import random
import signal
from multiprocessing.connection import Connection
from pathlib import Path

import pytest

from arthex.adapters.jsonl_history import JsonlHistory, append_line, encode_row
from arthex.core.identity import RunRef
from arthex.core.metrics import MetricsRow

RUN = RunRef("faults", "ledger")
WIDE = 40  # keys per row


def row(i: int) -> MetricsRow:
    return MetricsRow(step=i, values={f"train/metric_{k:03d}": i + k / 1000 for k in range(WIDE)})


def writer(path: str, start: int, acks: Connection) -> None:
    i = start
    while True:
        append_line(Path(path), encode_row(row(i)))
        acks.send(i)
        i += 1


def read_steps(history: JsonlHistory) -> list[int]:
    return [r.step for r in asyncio.run(history.rows(RUN))]


@pytest.mark.faults
def test_history_survives_100_kills(tmp_path: Path) -> None:
    history = JsonlHistory(str(tmp_path))
    path = history.path(RUN)
    rng = random.Random(1234)
    context = multiprocessing.get_context("fork")
    acked: list[int] = []
    for _ in range(100):
        start = len(read_steps(history))
        receive, send = context.Pipe(duplex=False)
        child = context.Process(target=writer, args=(str(path), start, send), daemon=True)
        child.start()
        send.close()
        this_round = 0
        for _ in range(rng.randint(1, 4)):  # the barrier: this many rows are acknowledged
            acked.append(receive.recv())
            this_round += 1
        assert child.pid is not None
        os.kill(child.pid, signal.SIGKILL)
        child.join()
        while receive.poll():
            try:
                acked.append(receive.recv())
            except EOFError:
                break
            this_round += 1
        receive.close()
        steps = read_steps(history)  # never raises: a torn last line is ignored
        # every acknowledged row is there, in order, without gaps or duplicates
        assert steps == list(range(len(steps)))
        assert set(acked) <= set(steps)
        # at most one row beyond the acknowledged ones: written, killed before the ack
        assert start + this_round <= len(steps) <= start + this_round + 1
    # one more append repairs whatever the last kill left, and loses nothing complete
    before = read_steps(history)
    asyncio.run(history.report(RUN, row(len(before))))
    after = read_steps(history)
    assert after == list(range(len(before) + 1))
    assert path.read_bytes().endswith(b"\n")
    assert len(acked) >= 100, "every round waits for at least one acknowledged row"

    # A kill cannot tear a line (each row is one write(2)); a power loss can. Cut the last
    # line short as one would, and check the next append repairs it and loses no whole row.
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 7])
    assert read_steps(history) == after[:-1]
    asyncio.run(history.report(RUN, row(len(after) - 1)))
    assert read_steps(history) == after
    assert path.with_name(path.name + ".torn").read_bytes().endswith(b"\n")
