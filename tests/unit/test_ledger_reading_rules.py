"""The ledger's reading rules at their edges, checked on the physical history.jsonl: the torn
line's warning (said once, naming the line or the byte it starts at), a ledger that is nothing
but a torn fragment, reading on from an offset in the middle, ART's non-finite tokens, a ledger
read in short preads or cut short while it is read, and the doctor's scan naming each damaged
line whatever its folder is called."""

from __future__ import annotations

import asyncio
import logging
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from arthex.adapters.jsonl_history import TORN_SUFFIX, JsonlHistory, append_line, encode_row, scan
from arthex.core.identity import RunRef
from arthex.core.metrics import MetricsRow

RUN = RunRef("proj", "agent-001")
T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
ROW0 = encode_row(MetricsRow(step=0, values={"x": 1.0}, recorded_at=T0))
ROW1 = encode_row(MetricsRow(step=1, values={"x": 2.5}, recorded_at=T0))
ROW2 = encode_row(MetricsRow(step=2, values={"x": 4.0}, recorded_at=T0))
TORN = b'{"step":3,"values":{"x'


def ledger_with(tmp_path: Path, content: bytes) -> tuple[JsonlHistory, Path]:
    history = JsonlHistory(str(tmp_path))
    path = history.path(RUN)
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    return history, path


def torn_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "is torn" in r.getMessage()]


def test_a_torn_last_line_is_said_once_by_its_line_number(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    history, path = ledger_with(tmp_path, ROW0 + ROW1 + TORN)
    with caplog.at_level(logging.WARNING, logger="arthex"):
        rows = asyncio.run(history.rows(RUN))
        again = asyncio.run(history.rows(RUN))
    assert [r.step for r in rows] == [r.step for r in again] == [0, 1]
    assert torn_warnings(caplog) == [
        f"{path}: line 3 is torn (a write cut short) and is left out; the next append moves it "
        "to history.jsonl.torn"
    ]


def test_read_from_an_offset_a_torn_line_is_named_by_the_byte_it_starts_at(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    history, path = ledger_with(tmp_path, ROW0 + ROW1 + TORN)
    offset = len(ROW0)  # read on after the first row, as a follower does
    with caplog.at_level(logging.WARNING, logger="arthex"):
        rows, next_offset = asyncio.run(history.rows_since(RUN, offset))
        asyncio.run(history.rows_since(RUN, offset))
    assert [r.step for r in rows] == [1]
    assert next_offset == len(ROW0) + len(ROW1)  # the torn line is read again next time
    assert torn_warnings(caplog) == [
        f"{path}: the line at byte {len(ROW0) + len(ROW1)} is torn (a write cut short) and is "
        "left out; the next append moves it to history.jsonl.torn"
    ]


def test_rows_since_an_offset_in_the_middle_returns_exactly_the_later_rows(
    tmp_path: Path,
) -> None:
    history, _ = ledger_with(tmp_path, ROW0 + ROW1 + ROW2)
    for offset, steps in [(len(ROW0), [1, 2]), (len(ROW0) + len(ROW1), [2])]:
        rows, next_offset = asyncio.run(history.rows_since(RUN, offset))
        assert [r.step for r in rows] == steps
        assert next_offset == len(ROW0) + len(ROW1) + len(ROW2)


def test_a_ledger_that_is_only_a_torn_fragment_is_moved_aside_whole_by_the_next_append(
    tmp_path: Path,
) -> None:
    history, path = ledger_with(tmp_path, TORN)
    append_line(path, ROW0)
    assert path.read_bytes() == ROW0
    assert path.with_name(path.name + TORN_SUFFIX).read_bytes() == TORN + b"\n"
    assert [r.step for r in asyncio.run(history.rows(RUN))] == [0]


def test_arts_non_finite_tokens_read_as_none(tmp_path: Path) -> None:
    # ART's writer lets json.dumps spell inf and nan as the tokens below
    history, _ = ledger_with(
        tmp_path, b'{"step":1,"loss":Infinity,"kl":-Infinity,"gap":NaN,"acc":0.5}\n'
    )
    (row,) = asyncio.run(history.rows(RUN))
    assert row.step == 1
    assert dict(row.values) == {"loss": None, "kl": None, "gap": None, "acc": 0.5}


def test_the_doctors_scan_reads_past_a_blank_first_line_and_keeps_an_unfinished_whole_row(
    tmp_path: Path,
) -> None:
    # a blank line (a newline at byte 0) and a last row whose newline never made it: both are
    # what readers accept, so the doctor names nothing
    _, path = ledger_with(tmp_path, b"\n" + ROW0 + ROW1.rstrip(b"\n"))
    scanned = scan(path)
    assert [r.step for r in scanned.rows] == [0, 1]
    assert scanned.lines == 3
    assert scanned.torn_line is None
    assert scanned.damaged == ()


def test_a_ledger_read_in_short_preads_is_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # one pread returns at most ~2 GiB on Linux; here every pread returns at most 7 bytes, so
    # the ledger comes back in many parts, which must join into the same bytes
    history, _ = ledger_with(tmp_path, ROW0 + ROW1 + ROW2)
    pread = os.pread
    monkeypatch.setattr(os, "pread", lambda fd, n, at: pread(fd, min(n, 7), at))
    rows = asyncio.run(history.rows(RUN))
    assert [(r.step, dict(r.values)) for r in rows] == [
        (0, {"x": 1.0}),
        (1, {"x": 2.5}),
        (2, {"x": 4.0}),
    ]


def test_a_ledger_cut_short_while_it_is_read_gives_the_rows_still_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # flock is advisory: something that takes no lock (`truncate`, an editor) can cut the file
    # after the reader took its size; the reader stops at the new end instead of failing
    history, path = ledger_with(tmp_path, ROW0 + ROW1 + ROW2)
    pread = os.pread

    def cut_first(fd: int, n: int, at: int) -> bytes:
        monkeypatch.setattr(os, "pread", pread)
        os.truncate(path, len(ROW0))
        return pread(fd, n, at)

    monkeypatch.setattr(os, "pread", cut_first)
    rows, next_offset = asyncio.run(history.rows_since(RUN, 0))
    assert [r.step for r in rows] == [0]
    assert next_offset == len(ROW0)


def test_the_doctors_scan_names_what_each_damaged_line_is_not_whatever_the_folder_is_called(
    tmp_path: Path,
) -> None:
    # the folder's name reads like a verdict; only the lines' own damage may be reported
    folder = tmp_path / "this is not a row"
    folder.mkdir()
    path = folder / "history.jsonl"
    path.write_bytes(ROW0 + b"nope\n" + b"[1]\n" + b'{"x":1}\n' + ROW1)
    scanned = scan(path)
    assert [r.step for r in scanned.rows] == [0, 1]
    assert scanned.lines == 5
    assert scanned.damaged == (
        (2, "not valid JSON"),
        (3, "not a JSON object"),
        (4, "not a history row"),
    )
