"""The ledger's line rules, checked on the physical history.jsonl: what `append_line` refuses,
how it finishes or undoes a line when the disk writes short or fails, what the torn-fragment
file looks like, and where a damaged line is said to be."""

from __future__ import annotations

import asyncio
import errno
import math
import os
import re
import stat
from datetime import UTC, datetime
from pathlib import Path

import pytest

from arthex.adapters.jsonl_history import (
    TORN_SUFFIX,
    JsonlHistory,
    append_line,
    encode_row,
    parse_lines,
    read_rows,
)
from arthex.core.errors import CorruptDataError, InvalidInputError
from arthex.core.identity import RunRef
from arthex.core.metrics import MetricsRow

RUN = RunRef("proj", "agent-001")
T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
ROW0 = encode_row(MetricsRow(step=0, values={"x": 1.0}, recorded_at=T0))
ROW1 = encode_row(MetricsRow(step=1, values={"x": 2.5, "y": 3.0}, recorded_at=T0))


def ledger(tmp_path: Path, content: bytes) -> Path:
    path = tmp_path / "history.jsonl"
    path.write_bytes(content)
    return path


def read_through(tmp_path: Path, content: bytes) -> tuple[JsonlHistory, Path, int]:
    """The run's ledger holding `content`, and the offset `rows_since` returns after it."""
    history = JsonlHistory(str(tmp_path))
    path = history.path(RUN)
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    _, offset = asyncio.run(history.rows_since(RUN, 0))
    return history, path, offset


class FlakyDisk:
    """The real `os.write`, but taking at most `chunk` bytes per call, and refusing every call
    after the first `good_calls` with ENOSPC: a disk that writes short, then fills up."""

    def __init__(self, chunk: int, good_calls: int) -> None:
        self._write = os.write
        self.chunk = chunk
        self.good_calls = good_calls
        self.calls = 0

    def __call__(self, fd: int, data: bytes) -> int:
        self.calls += 1
        if self.calls > self.good_calls:
            raise OSError(errno.ENOSPC, "No space left on device")
        return self._write(fd, bytes(data[: self.chunk]))


# --- what append_line refuses ------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [b'{"step":2}', b'{"step":2}\n{"step":3}\n', b'{"step":2}\n\n'],
    ids=["no newline", "two lines", "a blank line after it"],
)
def test_append_line_refuses_anything_but_one_line_and_leaves_the_file_alone(
    tmp_path: Path, line: bytes
) -> None:
    path = ledger(tmp_path, ROW0)
    with pytest.raises(InvalidInputError, match="must be one line ending in a newline"):
        append_line(path, line)
    assert path.read_bytes() == ROW0


# --- short writes and a full disk -------------------------------------------------------------


def test_a_line_the_disk_takes_a_few_bytes_at_a_time_still_lands_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = ledger(tmp_path, ROW0)
    disk = FlakyDisk(chunk=7, good_calls=len(ROW1) // 7 + 1)
    monkeypatch.setattr(os, "write", disk)
    append_line(path, ROW1)
    monkeypatch.undo()
    assert path.read_bytes() == ROW0 + ROW1
    assert disk.calls == math.ceil(len(ROW1) / 7)


def test_a_disk_that_fills_up_mid_line_leaves_the_ledger_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = ledger(tmp_path, ROW0)
    monkeypatch.setattr(os, "write", FlakyDisk(chunk=10, good_calls=1))
    with pytest.raises(OSError) as caught:
        append_line(path, ROW1)
    monkeypatch.undo()
    assert caught.value.errno == errno.ENOSPC
    assert path.read_bytes() == ROW0


def test_the_write_error_reaches_the_caller_even_when_the_half_line_cannot_be_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = ledger(tmp_path, ROW0)

    def refuse(fd: int, length: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "write", FlakyDisk(chunk=10, good_calls=1))
    monkeypatch.setattr(os, "ftruncate", refuse)
    with pytest.raises(OSError) as caught:
        append_line(path, ROW1)
    monkeypatch.undo()
    assert caught.value.errno == errno.ENOSPC
    assert path.read_bytes() == ROW0 + ROW1[:10]


# --- the torn-fragment file -------------------------------------------------------------------


def test_the_torn_fragment_file_gets_the_ledgers_own_permissions(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    append_line(path, ROW0)  # creates the ledger
    with path.open("ab") as handle:
        handle.write(b'{"step":1,"x":')
    append_line(path, ROW1)
    torn = path.with_name(path.name + TORN_SUFFIX)
    assert torn.read_bytes() == b'{"step":1,"x":\n'
    assert path.read_bytes() == ROW0 + ROW1
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644 & ~umask
    assert stat.S_IMODE(torn.stat().st_mode) == 0o644 & ~umask


# --- encoding ---------------------------------------------------------------------------------


def test_a_non_finite_value_put_into_a_row_after_its_checks_is_never_written() -> None:
    row = MetricsRow(step=0, values={"x": 1.0}, recorded_at=T0)
    row.values["x"] = math.inf  # type: ignore[index]
    with pytest.raises(ValueError, match="not JSON compliant"):
        encode_row(row)


# --- where a bad line is said to be -----------------------------------------------------------


def test_parse_lines_reads_from_the_top_of_the_file_unless_told_otherwise(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    rows, offset = parse_lines(ROW0 + ROW1, path)
    assert [r.step for r in rows] == [0, 1]
    assert offset == len(ROW0) + len(ROW1)
    with pytest.raises(CorruptDataError, match=f"^line 2 of {re.escape(str(path))} is not"):
        parse_lines(ROW0 + b"[1]\n", path)


def test_a_last_line_without_newline_that_is_no_row_is_named_by_its_line(tmp_path: Path) -> None:
    path = ledger(tmp_path, ROW0 + ROW1 + b'{"x":1}')
    with pytest.raises(
        CorruptDataError,
        match=f"^line 3 of {re.escape(str(path))} is not a history row: .*no integer 'step'",
    ):
        read_rows(path)


def test_a_bad_line_read_from_an_offset_is_named_by_its_byte_in_the_file(tmp_path: Path) -> None:
    history, path, offset = read_through(tmp_path, ROW0)
    assert offset == len(ROW0)
    for tail in (b"[1]\n", b'{"x":1}'):  # a whole bad line, then a last one without newline
        path.write_bytes(ROW0 + ROW1 + tail)
        at = len(ROW0) + len(ROW1)
        with pytest.raises(
            CorruptDataError, match=f"^the line at byte {at} of {re.escape(str(path))} is not"
        ):
            asyncio.run(history.rows_since(RUN, offset))


@pytest.mark.parametrize(
    ("line", "says"),
    [
        (b'{"step":1,"note":"' + b"a" * 182 + b"Z" * 50, "is not valid JSON"),
        (b'["' + b"a" * 198 + b"Z" * 50 + b'"]', "is not a JSON object"),
    ],
    ids=["broken JSON", "an array"],
)
def test_a_damaged_line_is_quoted_up_to_its_first_200_bytes(
    tmp_path: Path, line: bytes, says: str
) -> None:
    assert line[199:201] == b"aZ"  # the quote must end just before the first Z
    path = ledger(tmp_path, ROW0 + line + b"\n" + ROW1)
    with pytest.raises(
        CorruptDataError, match=f"^line 2 of {re.escape(str(path))} {says}"
    ) as caught:
        read_rows(path)
    message = str(caught.value)
    assert repr(line[:200]) in message and repr(line[:201]) not in message


def test_a_line_that_is_no_json_says_to_repair_or_remove_it_by_hand(tmp_path: Path) -> None:
    path = ledger(tmp_path, ROW0 + b'{"step":1,"x\n' + ROW1)
    with pytest.raises(CorruptDataError) as caught:
        read_rows(path)
    assert str(caught.value).endswith(
        "; the ledger is damaged in the middle: repair or remove that line by hand"
    )


# --- offsets that no longer fit ---------------------------------------------------------------


def test_an_offset_past_a_shrunken_ledger_says_to_read_again_from_the_start(
    tmp_path: Path,
) -> None:
    history, path, offset = read_through(tmp_path, ROW0 + ROW1)
    path.write_bytes(ROW0)
    with pytest.raises(
        CorruptDataError,
        match=f"is {len(ROW0)} bytes, shorter than the offset {offset} read before: the "
        "ledger was replaced or truncated; read it again from offset 0$",
    ):
        asyncio.run(history.rows_since(RUN, offset))


def test_a_ledger_deleted_after_reading_names_itself_and_the_offset(tmp_path: Path) -> None:
    history, path, offset = read_through(tmp_path, ROW0)
    path.unlink()
    with pytest.raises(
        CorruptDataError,
        match=f"^{re.escape(str(path))} no longer exists, but rows were read from it up to "
        f"offset {offset}$",
    ):
        asyncio.run(history.rows_since(RUN, offset))
