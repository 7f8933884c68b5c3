"""Edges of history.jsonl that mutation testing found unguarded: the synchronous reader the CLI
and loaders use, a torn row around the size the repair reads back at a time, whitespace after
the last row, and what a refused offset or key says."""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from arthex.adapters.jsonl_history import _TAIL_CHUNK, JsonlHistory, encode_row, read_rows
from arthex.core.errors import CorruptDataError, InvalidInputError
from arthex.core.identity import RunRef
from arthex.core.metrics import MetricsRow

RUN = RunRef("proj", "agent-001")
T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)


def row(step: int, **values: float) -> MetricsRow:
    return MetricsRow(step=step, values=values, recorded_at=T0)


def report(history: JsonlHistory, *rows: MetricsRow) -> None:
    async def go() -> None:
        for each in rows:
            await history.report(RUN, each)

    asyncio.run(go())


def torn_row(length: int) -> bytes:
    """The first `length` bytes of a row whose writer crashed: no closing brace, no newline."""
    head = b'{"step":9,"pad":"'
    return head + b"a" * (length - len(head))


# --- read_rows --------------------------------------------------------------------------------


def test_read_rows_returns_every_whole_row_and_ignores_a_torn_tail(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    path.write_bytes(encode_row(row(0, x=1.0)) + encode_row(row(1, x=2.5)) + b'{"step":2,"x":3')
    rows = read_rows(path)
    assert [(r.step, dict(r.values), r.recorded_at) for r in rows] == [
        (0, {"x": 1.0}, T0),
        (1, {"x": 2.5}, T0),
    ]


def test_read_rows_of_a_missing_ledger_is_empty(tmp_path: Path) -> None:
    assert read_rows(tmp_path / "history.jsonl") == []


def test_read_rows_names_the_line_number_of_a_damaged_line(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    path.write_bytes(encode_row(row(0, x=1.0)) + b'{"step":1,"x\n' + encode_row(row(2, x=1.0)))
    with pytest.raises(
        CorruptDataError, match=f"line 2 of {re.escape(str(path))} is not valid JSON"
    ):
        read_rows(path)


# --- repairing a torn tail --------------------------------------------------------------------


@pytest.mark.parametrize("length", [_TAIL_CHUNK - 1, _TAIL_CHUNK, _TAIL_CHUNK + 1])
@pytest.mark.parametrize(
    "before", [encode_row(row(0, x=1.0)), b"\n"], ids=["after a row", "after a blank line"]
)
def test_a_torn_row_as_long_as_a_read_chunk_is_cut_back_to_the_newline_before_it(
    tmp_path: Path, before: bytes, length: int
) -> None:
    history = JsonlHistory(str(tmp_path))
    path = history.path(RUN)
    path.parent.mkdir(parents=True)
    fragment = torn_row(length)
    path.write_bytes(before + fragment)
    later = row(1, x=2.0)
    report(history, later)
    assert path.read_bytes() == before + encode_row(later)  # the whole lines before it stay
    assert path.with_name("history.jsonl.torn").read_bytes() == fragment + b"\n"


def test_whitespace_after_the_last_row_is_no_torn_row(tmp_path: Path) -> None:
    history = JsonlHistory(str(tmp_path))
    report(history, row(0, x=1.0))
    path = history.path(RUN)
    whole = path.read_bytes() + b"  "
    path.write_bytes(whole)
    assert asyncio.run(history.rows_since(RUN, 0))[1] == len(whole)  # nothing left to wait for
    later = row(1, x=2.0)
    report(history, later)
    assert path.read_bytes() == whole + b"\n" + encode_row(later)
    assert not path.with_name("history.jsonl.torn").exists()
    assert [r.step for r in read_rows(path)] == [0, 1]


# --- refusals ---------------------------------------------------------------------------------


def test_rows_since_refuses_a_boolean_offset_saying_what_an_offset_is(tmp_path: Path) -> None:
    history = JsonlHistory(str(tmp_path))
    report(history, row(0, x=1.0))
    with pytest.raises(
        InvalidInputError,
        match="offset must be a byte offset >= 0 returned by rows_since, got True",
    ):
        asyncio.run(history.rows_since(RUN, True))


def test_a_key_utf8_cannot_store_is_named_alone_among_good_keys() -> None:
    bad = "bad\ud800"
    with pytest.raises(InvalidInputError) as refused:
        encode_row(row(0, good=1.0, **{bad: 2.0}, also_good=3.0))
    assert str(refused.value) == (
        f"metric keys {[bad]!r} hold lone surrogates, which UTF-8 cannot store; rename them"
    )
