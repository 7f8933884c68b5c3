"""Contract kits for where metric rows go: MetricsReporter (a mirror) and MetricsHistory (the
ledger the policies read back).

A reporter author subclasses `MetricsReporterContract` and overrides the `reporter` fixture;
one whose rows can be read back (a wandb offline run, say) also overrides `read_back` and gets
value checks. A history author subclasses `MetricsHistoryContract` and overrides `history`.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest

from ...core.identity import RunRef
from ...core.metrics import MetricsRow
from ...ports.metrics_reporter import MetricsHistory, MetricsReporter

RUN = RunRef("contract", "run-a")
T0 = datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)

# Values whose decimal round trip is easy to get wrong: tiny, subnormal, huge, exact integers.
AWKWARD_VALUES: tuple[float, ...] = (
    0.1,
    -2.5,
    1e-300,
    5e-324,
    1.7976931348623157e308,
    2.0**53 + 2.0,
    1 / 3,
    0.0,
)
# Keys that must survive quoting and encoding: non-ASCII, quotes, backslashes, a newline.
AWKWARD_KEYS: tuple[str, ...] = (
    "train/reward",
    "val/ünïcødé-报酬",
    'custom/"quoted"\\key',
    "multi\nline",
    "spaced key",
)


def make_row(step: int, index: int = 0, /, **values: float | None) -> MetricsRow:
    """A row with a deterministic `recorded_at`, so a read back can be compared exactly."""
    return MetricsRow(
        step=step, values=values, recorded_at=T0 + timedelta(seconds=index, microseconds=index)
    )


def _report_all(reporter: MetricsReporter, run: RunRef, rows: Sequence[MetricsRow]) -> None:
    async def go() -> None:
        for row in rows:
            await reporter.report(run, row)

    asyncio.run(go())


def _same_row(got: MetricsRow, want: MetricsRow) -> bool:
    return (
        got.step == want.step
        and dict(got.values) == dict(want.values)
        and got.recorded_at == want.recorded_at
    )


class MetricsReporterContract:
    """What every reporter must do: take any row, at any step, and close twice harmlessly."""

    @pytest.fixture
    def reporter(self) -> MetricsReporter:
        raise NotImplementedError("override the `reporter` fixture to return your reporter")

    def read_back(self, reporter: MetricsReporter, run: RunRef) -> list[MetricsRow] | None:
        """Override to return the rows `reporter` recorded for `run` (after `close`), in order;
        the default None means the reporter cannot be read back and values go unchecked."""
        return None

    def _check_mirrored(
        self, reporter: MetricsReporter, run: RunRef, sent: Sequence[MetricsRow]
    ) -> None:
        got = self.read_back(reporter, run)
        if got is None:
            return
        assert [row.step for row in got] == [row.step for row in sent]
        for got_row, sent_row in zip(got, sent, strict=True):
            for key, value in sent_row.values.items():
                if value is None:
                    # A mirror may drop a non-finite value or keep it as None; never a number.
                    assert got_row.values.get(key) is None, key
                else:
                    assert got_row.values.get(key) == value, key

    def test_reports_rows_with_non_finite_values_and_closes_twice(
        self, reporter: MetricsReporter
    ) -> None:
        sent = [
            make_row(0, 0, **{"train/reward": 0.5, "train/reward_std_dev": 0.0}),
            make_row(0, 1, **{"train/reward": math.nan, "loss/train": math.inf}),
            make_row(1, 2, **{"loss/train": -math.inf, "loss/grad_norm": 3.25}),
            make_row(1, 3, **{"val/reward": 1.0, "val/missing": None}),
        ]
        _report_all(reporter, RUN, sent)
        asyncio.run(reporter.close())
        self._check_mirrored(reporter, RUN, sent)
        asyncio.run(reporter.close())

    def test_accepts_rows_at_out_of_order_steps(self, reporter: MetricsReporter) -> None:
        sent = [
            make_row(step, index, **{"val/reward": float(index)})
            for index, step in enumerate([5, 3, 5, 0, 7, 1])
        ]
        _report_all(reporter, RUN, sent)
        asyncio.run(reporter.close())
        self._check_mirrored(reporter, RUN, sent)


class MetricsHistoryContract(MetricsReporterContract):
    """What the ledger must do: give back every row, exactly, in the order it was appended."""

    @pytest.fixture
    def history(self) -> MetricsHistory:
        raise NotImplementedError("override the `history` fixture to return your history")

    @pytest.fixture
    def reporter(self, history: MetricsHistory) -> MetricsReporter:
        return history

    def read_back(self, reporter: MetricsReporter, run: RunRef) -> list[MetricsRow] | None:
        return list(asyncio.run(cast(MetricsHistory, reporter).rows(run)))

    def _rows(self, history: MetricsHistory, run: RunRef = RUN) -> list[MetricsRow]:
        return list(asyncio.run(history.rows(run)))

    def _assert_rows(self, got: Sequence[MetricsRow], want: Sequence[MetricsRow]) -> None:
        assert len(got) == len(want)
        for index, (got_row, want_row) in enumerate(zip(got, want, strict=True)):
            assert _same_row(got_row, want_row), (index, got_row, want_row)

    def test_rows_read_back_in_append_order_with_exact_values(
        self, history: MetricsHistory
    ) -> None:
        sent = [
            make_row(
                index // 2,
                index,
                **{key: value if k % 2 == 0 else -value for k, key in enumerate(AWKWARD_KEYS)},
            )
            for index, value in enumerate(AWKWARD_VALUES)
        ]
        sent.append(make_row(9, 99, **{"train/int_valued": 7}))
        _report_all(history, RUN, sent)
        got = self._rows(history)
        self._assert_rows(got, sent)
        assert all(type(v) is float for row in got for v in row.values.values())

    def test_non_finite_values_read_back_as_none_with_the_key_kept(
        self, history: MetricsHistory
    ) -> None:
        _report_all(
            history,
            RUN,
            [make_row(2, 0, **{"a": math.nan, "b": math.inf, "c": -math.inf, "d": 1.5, "e": None})],
        )
        (row,) = self._rows(history)
        assert dict(row.values) == {"a": None, "b": None, "c": None, "d": 1.5, "e": None}

    def test_separate_runs_are_isolated(self, history: MetricsHistory) -> None:
        runs = [RunRef("proj-a", "run"), RunRef("proj-b", "run"), RunRef("proj-a", "run-2")]
        sent: dict[RunRef, list[MetricsRow]] = {run: [] for run in runs}
        for index in range(9):
            run = runs[index % 3]
            row = make_row(index, index, **{"train/reward": float(index)})
            sent[run].append(row)
            _report_all(history, run, [row])
        for run in runs:
            self._assert_rows(self._rows(history, run), sent[run])

    def test_late_columns_are_kept(self, history: MetricsHistory) -> None:
        sent = [make_row(index, index, **{"train/reward": float(index)}) for index in range(200)]
        sent += [
            make_row(200 + index, 200 + index, **{"train/reward": 1.0, "val/late": float(index)})
            for index in range(5)
        ]
        _report_all(history, RUN, sent)
        got = self._rows(history)
        self._assert_rows(got, sent)
        assert [row.values.get("val/late") for row in got[200:]] == [0.0, 1.0, 2.0, 3.0, 4.0]
        assert not any("val/late" in row.values for row in got[:200])

    def test_rows_at_the_same_step_are_kept_separately(self, history: MetricsHistory) -> None:
        sent = [make_row(4, index, **{"val/reward": float(index)}) for index in range(3)]
        sent.append(make_row(4, 3, **{"train/reward": 0.25}))
        _report_all(history, RUN, sent)
        self._assert_rows(self._rows(history), sent)

    def test_steps_out_of_order_are_kept_as_written(self, history: MetricsHistory) -> None:
        steps = [3, 1, 2, 1, 0, 10, 0]
        sent = [
            make_row(step, index, **{"val/reward": float(index)})
            for index, step in enumerate(steps)
        ]
        _report_all(history, RUN, sent)
        got = self._rows(history)
        assert [row.step for row in got] == steps
        self._assert_rows(got, sent)

    def test_unknown_run_reads_as_empty(self, history: MetricsHistory) -> None:
        assert self._rows(history, RunRef("never", "reported")) == []
        _report_all(history, RUN, [make_row(0, 0, **{"train/reward": 1.0})])
        assert self._rows(history, RunRef(RUN.project, "other")) == []
        assert self._rows(history, RunRef("other", RUN.name)) == []

    def test_concurrent_reports_are_all_kept(self, history: MetricsHistory) -> None:
        sent = [make_row(index % 4, index, **{"seq": float(index)}) for index in range(40)]

        async def go() -> None:
            await asyncio.gather(*(history.report(RUN, row) for row in sent))

        asyncio.run(go())
        got = self._rows(history)
        assert sorted(cast(float, row.values["seq"]) for row in got) == [
            float(i) for i in range(40)
        ]
        by_seq = {row.values["seq"]: row for row in got}
        assert all(_same_row(by_seq[row.values["seq"]], row) for row in sent)

    def test_the_ledger_cannot_be_changed_behind_its_back(self, history: MetricsHistory) -> None:
        row = make_row(1, 0, **{"train/reward": 1.0})
        _report_all(history, RUN, [row])
        cast(dict[str, Any], row.values)["train/reward"] = -1.0
        first = self._rows(history)
        cast(dict[str, Any], first[0].values)["injected"] = 5.0
        assert dict(self._rows(history)[0].values) == {"train/reward": 1.0}

    def test_rows_stay_readable_after_close(self, history: MetricsHistory) -> None:
        sent = [make_row(0, 0, **{"train/reward": 2.0})]
        _report_all(history, RUN, sent)
        asyncio.run(history.close())
        self._assert_rows(self._rows(history), sent)

    def test_rows_since_returns_only_new_rows(self, history: MetricsHistory) -> None:
        """The incremental read the policies catch up with before every decision."""

        def since(cursor: int) -> tuple[list[MetricsRow], int]:
            return asyncio.run(history.rows_since(RUN, cursor))

        assert since(0) == ([], 0)
        first = [make_row(i, i, **{"train/reward": float(i)}) for i in range(3)]
        _report_all(history, RUN, first)
        got, cursor = since(0)
        self._assert_rows(got, first)
        assert since(cursor) == ([], cursor)
        second = [make_row(3 + i, 3 + i, **{"val/reward": float(i)}) for i in range(2)]
        _report_all(history, RUN, second)
        got, later = since(cursor)
        self._assert_rows(got, second)
        assert later > cursor
        self._assert_rows(since(0)[0], first + second)
