"""JsonlHistory: `history.jsonl`, the authoritative metrics ledger, in ART's row format.

Every append happens under an exclusive `flock` on the file itself, as one `os.write` of a whole
line, followed by `fsync`. Several processes (a trainer, an evaluator, a restarted trainer) may
append to one run's ledger at once; the lock keeps their lines whole and each writer's rows in
its own order. A crash between `write` and the newline reaching the disk can still leave a torn
last line; the next writer, under the lock, moves that fragment to `history.jsonl.torn` and cuts
the file back to its last newline before appending, so one crash never poisons the ledger.
Readers take a shared lock, so they never see a repair half-done, and leave a torn last line
out, saying so once per process (a warning naming the file and the line).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from ..core.errors import CorruptDataError, InvalidInputError
from ..core.identity import RunRef
from ..core.metrics import MetricsRow
from ..core.training_row import trained_rows
from .files import fsync_dir, full_disk_said
from .layout import HISTORY, RunLayout

if TYPE_CHECKING:
    from ..ports.metrics_reporter import MetricsHistory

HISTORY_FILE = HISTORY
TORN_SUFFIX = ".torn"
_NEWLINE = b"\n"
_TAIL_CHUNK = 64 * 1024

logger = logging.getLogger("arthex")
_torn_seen: set[tuple[str, int]] = set()  # (ledger, byte offset) of torn lines warned about


class JsonlHistory:
    """The ledger at `{root}/{project}/models/{name}/history.jsonl`.

    Holds nothing open between calls: each append opens, locks, writes, fsyncs and closes, so
    an instance is cheap, safe to share between tasks, and `close()` has nothing to release.
    """

    def __init__(self, root: str) -> None:
        self._root = Path(root)

    def path(self, run: RunRef) -> Path:
        """Where `run`'s ledger lives; the run's names were validated as path segments."""
        return RunLayout.of(self._root, run).history

    async def report(self, run: RunRef, row: MetricsRow) -> None:
        line = encode_row(row)
        await asyncio.to_thread(append_line, self.path(run), line)

    async def rows(self, run: RunRef) -> Sequence[MetricsRow]:
        rows, _ = await asyncio.to_thread(_read_from, self.path(run), 0, True)
        return rows

    async def rows_since(self, run: RunRef, offset: int) -> tuple[list[MetricsRow], int]:
        """Rows appended after byte `offset` (0 = the start), and the offset to pass next time.

        The returned offset only ever moves past whole rows, so a row that is still being
        written is returned by a later call, never lost and never returned twice.
        """
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise InvalidInputError(
                f"offset must be a byte offset >= 0 returned by rows_since, got {offset!r}"
            )
        return await asyncio.to_thread(_read_from, self.path(run), offset, False)

    async def close(self) -> None:
        """Nothing is held open between calls; kept for the port's lifecycle."""


def encode_row(row: MetricsRow) -> bytes:
    """One ledger line, newline included. `allow_nan=False` turns a non-finite value that
    slipped past MetricsRow into an error here instead of an `Infinity` token on disk."""
    text = json.dumps(row.to_json(), allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    try:
        return text.encode() + _NEWLINE
    except UnicodeEncodeError as exc:
        bad = [key for key in row.values if not _encodable(key)]
        raise InvalidInputError(
            f"metric keys {bad!r} hold lone surrogates, which UTF-8 cannot store; rename them"
        ) from exc


def _encodable(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


# -- writing ----------------------------------------------------------------------------------


@contextlib.contextmanager
def _locked(path: Path, flags: int, lock: int) -> Iterator[int]:
    fd = os.open(path, flags | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, lock)
        try:
            yield fd
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def append_line(path: Path, line: bytes) -> None:
    """Append one whole line (ending in a newline) to `path`, durably, under an exclusive lock."""
    if not line.endswith(_NEWLINE) or _NEWLINE in line[:-1]:
        raise InvalidInputError(
            f"a ledger line must be one line ending in a newline: {line!r:.200}"
        )
    created = not path.exists()
    if created:
        path.parent.mkdir(parents=True, exist_ok=True)
    with (
        full_disk_said(path, len(line)),
        _locked(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, fcntl.LOCK_EX) as fd,
    ):
        prefix = _repair_tail(fd, path)
        data = prefix + line
        size = os.fstat(fd).st_size
        try:
            written = os.write(fd, data)
            # A regular file only writes short on a full disk or a signal; the lock keeps other
            # writers out, so finishing the line with more writes cannot interleave with them.
            while written < len(data):
                written += os.write(fd, data[written:])
            os.fsync(fd)
        except BaseException:
            # Leave no half line behind for the next writer to clean up, when we can.
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)
                os.fsync(fd)
            raise
    if created:
        fsync_dir(path.parent)


def _repair_tail(fd: int, path: Path) -> bytes:
    """Make the file end at a line boundary; return what must precede the next line.

    A last line without its newline is either a complete JSON object whose newline never made
    it (readers already accept it: return a newline to finish it) or a torn fragment of a line
    (append it to the `.torn` file for forensics, then cut the ledger back to its last newline).
    """
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == _NEWLINE:
        return b""
    start = _last_line_start(fd, size)
    fragment = os.pread(fd, size - start, start)
    if _is_complete_tail(fragment):
        return _NEWLINE
    torn = path.with_name(path.name + TORN_SUFFIX)
    torn_fd = os.open(torn, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        os.write(torn_fd, fragment + _NEWLINE)
        os.fsync(torn_fd)
    finally:
        os.close(torn_fd)
    os.ftruncate(fd, start)
    os.fsync(fd)
    return b""


def _last_line_start(fd: int, size: int) -> int:
    """The offset just after the last newline before `size` (0 if there is none)."""
    end = size
    while end > 0:
        begin = max(0, end - _TAIL_CHUNK)
        chunk = os.pread(fd, end - begin, begin)
        index = chunk.rfind(_NEWLINE)
        if index >= 0:
            return begin + index + 1
        end = begin
    return 0


def _is_complete_tail(fragment: bytes) -> bool:
    # A proper prefix of a JSON object is never a JSON object itself (its outer brace is still
    # open), so "parses as an object" tells a finished row from a torn one.
    if not fragment.strip():
        return True
    try:
        return isinstance(_loads(fragment), dict)
    except (UnicodeDecodeError, ValueError):
        return False


# -- reading ----------------------------------------------------------------------------------


def _loads(data: bytes) -> Any:
    # NaN/Infinity/-Infinity are not JSON, but ART writes `Infinity`; they read as None.
    return json.loads(data.decode(), parse_constant=lambda _token: None)


def read_rows(path: Path) -> list[MetricsRow]:
    """The rows of the ledger at `path` that readers show (none when it does not exist): read
    as `rows` reads it (under the shared lock, a torn last line left out (said once), line
    numbers on corruption), less the batch rows of updates that never trained, which a later
    marker retired (core/training_row.py)."""
    return trained_rows(_read_from(path, 0, True)[0])


def _read_from(path: Path, offset: int, count_lines: bool) -> tuple[list[MetricsRow], int]:
    try:
        with _locked(path, os.O_RDONLY, fcntl.LOCK_SH) as fd:
            size = os.fstat(fd).st_size
            if offset > size:
                raise CorruptDataError(
                    f"{path} is {size} bytes, shorter than the offset {offset} read before: the "
                    "ledger was replaced or truncated; read it again from offset 0"
                )
            data = _pread_all(fd, offset, size)
    except FileNotFoundError:
        if offset:
            raise CorruptDataError(
                f"{path} no longer exists, but rows were read from it up to offset {offset}"
            ) from None
        return [], 0
    return parse_lines(data, path, offset, count_lines)


@attrs.frozen
class HistoryScan:
    """The whole ledger read line by line, every damaged line named instead of the first one
    raised: what `arthex doctor` reports. `torn_line` is the number of a torn last line (left
    out by readers, moved aside by the next append), `damaged` each other line that is not a
    row, as (line number, what is wrong)."""

    rows: tuple[MetricsRow, ...]
    lines: int
    torn_line: int | None = None
    damaged: tuple[tuple[int, str], ...] = ()


def scan(path: Path) -> HistoryScan:
    """Read the ledger at `path` as `read_rows` does (under the shared lock, the same row
    parser), but go on past a damaged line and name each one. FileNotFoundError when absent."""
    with _locked(path, os.O_RDONLY, fcntl.LOCK_SH) as fd:
        data = _pread_all(fd, 0, os.fstat(fd).st_size)
    rows: list[MetricsRow] = []
    damaged: list[tuple[int, str]] = []
    torn: int | None = None
    position = number = 0
    while position < len(data):
        end = data.find(_NEWLINE, position)
        number += 1
        line = data[position:] if end < 0 else data[position:end]
        if end < 0 and not _is_complete_tail(line):
            torn = number
        elif line.strip():
            try:
                rows.append(_parse_row(line))
            except _NotARow as bad:
                damaged.append((number, bad.args[0]))
        position = len(data) if end < 0 else end + 1
    return HistoryScan(tuple(rows), number, torn, tuple(damaged))


def _pread_all(fd: int, start: int, end: int) -> bytes:
    # One pread returns at most ~2 GiB on Linux; a long ledger needs more than one.
    parts: list[bytes] = []
    while start < end:
        part = os.pread(fd, end - start, start)
        if not part:
            break
        parts.append(part)
        start += len(part)
    return b"".join(parts)


def parse_lines(
    data: bytes, path: Path, offset: int = 0, count_lines: bool = True
) -> tuple[list[MetricsRow], int]:
    """Rows in `data` (the ledger's bytes from `offset`), and the offset after the last row.

    Every line that ends in a newline must be a row (else CorruptDataError naming the line);
    a last line without one is accepted when it is a complete object and ignored otherwise.
    `count_lines` is true when `data` starts at the top of the file, so line numbers are real.
    """
    rows: list[MetricsRow] = []
    position = 0
    number = 0
    while position < len(data):
        end = data.find(_NEWLINE, position)
        number += 1
        if end < 0:
            fragment = data[position:]
            if _is_complete_tail(fragment):
                if fragment.strip():
                    rows.append(_row(fragment, path, offset + position, number, count_lines))
                position = len(data)
            else:
                _warn_torn(path, offset + position, number if count_lines else None)
            break
        line = data[position:end]
        if line.strip():
            rows.append(_row(line, path, offset + position, number, count_lines))
        position = end + 1
    return rows, offset + position


def _warn_torn(path: Path, at: int, number: int | None) -> None:
    """Say once per process that the torn line at byte `at` of `path` is left out."""
    if (str(path), at) in _torn_seen:
        return
    _torn_seen.add((str(path), at))
    where = f"line {number}" if number is not None else f"the line at byte {at}"
    logger.warning(
        "%s: %s is torn (a write cut short) and is left out; the next append moves it to %s",
        path,
        where,
        path.name + TORN_SUFFIX,
    )


class _NotARow(Exception):
    """Raised by `_parse_row` with two args: what the line is not ("not valid JSON", "not a
    JSON object", "not a history row"), which `scan` reports, and the rest of the message."""


def _row(line: bytes, path: Path, at: int, number: int, count_lines: bool) -> MetricsRow:
    """The row on `line`, or CorruptDataError naming the line (its number when `count_lines`,
    else the byte it starts at) and what is wrong with it."""
    try:
        return _parse_row(line)
    except _NotARow as bad:
        where = f"line {number} of {path}" if count_lines else f"the line at byte {at} of {path}"
        problem, detail = bad.args
        raise CorruptDataError(f"{where} is {problem}{detail}") from bad.__cause__


def _parse_row(line: bytes) -> MetricsRow:
    try:
        obj = _loads(line)
    except (UnicodeDecodeError, ValueError) as exc:
        raise _NotARow(
            "not valid JSON",
            f" ({exc}): {line[:200]!r}; the ledger is damaged in the middle: repair or remove "
            "that line by hand",
        ) from exc
    if not isinstance(obj, dict):
        raise _NotARow("not a JSON object", f": {line[:200]!r}")
    try:
        return MetricsRow.from_json(obj)
    except (InvalidInputError, OverflowError) as exc:
        raise _NotARow("not a history row", f": {exc}") from exc


if TYPE_CHECKING:
    _fits: type[MetricsHistory] = JsonlHistory
