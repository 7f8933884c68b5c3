"""`arthex.utils`: iterate_dataset, retry and limit_concurrency mean what ART's do.

Expected values marked "ART 0.5.23" were printed by `art.utils` of openpipe-art 0.5.23 for
the same inputs (its order for seed 0 is `random.Random(epoch)` shuffling the indices).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import pytest

import arthex
from arthex.core.errors import InvalidInputError
from arthex.utils import DatasetBatch, iterate_dataset, limit_concurrency, retry
from arthex.utils.iterate_dataset import epoch_order


def batches(**kwargs: object) -> list[tuple[list[str], int, int, int]]:
    return [
        (b.items, b.step, b.epoch, b.epoch_step)
        for b in iterate_dataset(list("abcdefg"), use_tqdm=False, **kwargs)  # type: ignore[arg-type]
    ]


def test_iterate_dataset_visits_every_item_per_epoch_in_arts_order() -> None:
    assert batches(groups_per_step=3, num_epochs=2) == [  # ART 0.5.23
        (["e", "c", "b"], 0, 0, 0),
        (["a", "f", "d"], 1, 0, 1),
        (["g"], 2, 0, 2),
        (["d", "g", "f"], 3, 1, 0),
        (["c", "a", "e"], 4, 1, 1),
        (["b"], 5, 1, 2),
    ]


def test_iterate_dataset_resumes_at_the_initial_step() -> None:
    assert batches(groups_per_step=3, num_epochs=2, initial_step=4) == [  # ART 0.5.23
        (["c", "a", "e"], 4, 1, 1),
        (["b"], 5, 1, 2),
    ]
    full = batches(groups_per_step=2, num_epochs=3)
    for start in range(len(full) + 2):
        assert batches(groups_per_step=2, num_epochs=3, initial_step=start) == full[start:]


def test_a_seed_gives_another_reproducible_order_and_shuffle_false_keeps_the_order() -> None:
    seeded = batches(groups_per_step=7, seed=3)
    assert seeded == batches(groups_per_step=7, seed=3)
    assert seeded != batches(groups_per_step=7)
    assert sorted(seeded[0][0]) == list("abcdefg")
    assert batches(groups_per_step=4, shuffle=False) == [
        (["a", "b", "c", "d"], 0, 0, 0),
        (["e", "f", "g"], 1, 0, 1),
    ]
    # no seed's epoch repeats another's (Random(2) and Random(2**32 + 2) would)
    orders = {tuple(epoch_order(50, e, seed=s)) for s in range(4) for e in range(4)}
    assert len(orders) == 16


def test_iterate_dataset_yields_typed_batches_and_nothing_for_an_empty_dataset() -> None:
    first = next(iterate_dataset([1, 2, 3], groups_per_step=2, use_tqdm=False))
    assert isinstance(first, DatasetBatch)
    assert list(iterate_dataset([], groups_per_step=2, num_epochs=5)) == []
    assert list(iterate_dataset(range(3), num_epochs=0)) == []


@pytest.mark.parametrize(
    ("kwargs", "word"),
    [
        ({"groups_per_step": 0}, "groups_per_step"),
        ({"num_epochs": -1}, "num_epochs"),
        ({"initial_step": -2}, "initial_step"),
        ({"seed": -1}, "seed"),
        ({"groups_per_step": 1.5}, "groups_per_step"),
    ],
)
def test_iterate_dataset_refuses_bad_arguments_at_the_call(
    kwargs: dict[str, object], word: str
) -> None:
    with pytest.raises(InvalidInputError, match=word):
        iterate_dataset([1, 2], **kwargs)  # type: ignore[arg-type]


def test_retry_waits_longer_each_time_and_returns_the_first_success(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    waits: list[float] = []
    monkeypatch.setattr("time.sleep", waits.append)
    seen: list[tuple[str, int]] = []
    attempts = [0]

    @retry(
        max_attempts=4,
        delay=0.5,
        backoff_factor=3.0,
        exceptions=(KeyError,),
        on_retry=lambda e, a: seen.append((type(e).__name__, a)),
    )
    def flaky() -> str:
        attempts[0] += 1
        if attempts[0] < 4:
            raise KeyError(attempts[0])
        return "done"

    assert flaky() == "done"
    # ART 0.5.23: on_retry after attempts 1..3, waits 0.5, 1.5, 4.5
    assert seen == [("KeyError", 1), ("KeyError", 2), ("KeyError", 3)]
    assert waits == [0.5, 1.5, 4.5]
    assert flaky.__name__ == "flaky"


def test_retry_on_a_coroutine_raises_the_last_error_after_max_attempts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    waits: list[float] = []

    async def no_wait(seconds: float) -> None:
        waits.append(seconds)

    monkeypatch.setattr("asyncio.sleep", no_wait)
    seen: list[tuple[str, int]] = []

    @retry(max_attempts=3, exceptions=ValueError, on_retry=lambda e, a: seen.append((str(e), a)))
    async def always() -> int:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        asyncio.run(always())
    assert seen == [("boom", 1), ("boom", 2)]  # ART 0.5.23
    assert waits == [0.25, 0.5]


def test_retry_lets_other_exceptions_through_at_once_and_logs_without_a_callback(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr("time.sleep", lambda _: None)
    calls = [0]

    @arthex.retry(exceptions=KeyError)
    def wrong_kind() -> None:
        calls[0] += 1
        raise TypeError("not retried")

    with pytest.raises(TypeError):
        wrong_kind()
    assert calls == [1]

    @retry(max_attempts=2)
    def once_then_fine() -> int:
        calls[0] += 1
        if calls[0] == 2:
            raise RuntimeError("flaky")
        return calls[0]

    with caplog.at_level(logging.WARNING, logger="arthex"):
        assert once_then_fine() == 3
    assert "retry 1/2" in caplog.text and "flaky" in caplog.text


def test_retry_never_retries_a_cancellation(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = [0]

    @retry(exceptions=BaseException)
    async def cancelled() -> None:
        calls[0] += 1
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(cancelled())
    assert calls == [1]


@pytest.mark.parametrize(
    "make",
    [lambda: retry(max_attempts=0), lambda: retry(delay=-1), lambda: retry(backoff_factor=-0.5)],
)
def test_retry_refuses_bad_arguments(make: Callable[[], object]) -> None:
    with pytest.raises(InvalidInputError):
        make()


def test_limit_concurrency_caps_running_calls_per_key() -> None:
    running: dict[str, int] = {}
    peak: dict[str, int] = {}

    @limit_concurrency(2, derive_key=lambda key, _: key)
    async def work(key: str, gate: asyncio.Event) -> None:
        running[key] = running.get(key, 0) + 1
        peak[key] = max(peak.get(key, 0), running[key])
        await gate.wait()
        running[key] -= 1

    async def main() -> None:
        gate = asyncio.Event()
        tasks = [asyncio.create_task(work(k, gate)) for k in "aaaaabbb"]
        for _ in range(5):  # let every task that can start, start
            await asyncio.sleep(0)
        assert running == {"a": 2, "b": 2}
        gate.set()
        await asyncio.gather(*tasks)

    asyncio.run(main())
    assert peak == {"a": 2, "b": 2}
    with pytest.raises(InvalidInputError):
        limit_concurrency(0)


def test_both_import_spellings_of_iterate_dataset_give_the_function() -> None:
    import subprocess
    import sys

    script = (
        "import arthex.utils.iterate_dataset\n"
        "from arthex.utils.iterate_dataset import iterate_dataset\n"
        "import arthex\n"
        "assert callable(arthex.utils.iterate_dataset), type(arthex.utils.iterate_dataset)\n"
        "assert arthex.utils.iterate_dataset is iterate_dataset\n"
        "assert arthex.retry is arthex.utils.retry\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True)
