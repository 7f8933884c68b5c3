"""The viewer's reading of a run's ledger: `JsonlHistory.rows_since` (the ledger's shared
lock, its torn-last-line rule), or `parse_lines` over the bytes of a ledger on an object store;
read once, then only from where the last read stopped.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import fnmatch
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

from ...adapters.jsonl_history import JsonlHistory, parse_lines
from ...adapters.layout import (
    HISTORY,
)
from ...core.errors import CorruptDataError
from ...core.history_index import HistoryIndex
from ...core.metrics import MetricsRow
from ...core.retention import BestStep
from ...core.training_row import is_batch_row, supersedes
from .catalog import BadRequest, Catalog, Run, encode


def history_of(catalog: Catalog, run: Run) -> HistoryCache:
    """The run's parsed ledger, brought up to date with the rows appended since."""
    key = run.file(HISTORY)
    with catalog.lock:
        cache = catalog.histories.get(key)
        if not isinstance(cache, HistoryCache):
            cache = catalog.histories[key] = HistoryCache(run)
    with cache.lock:
        cache.refresh()
    return cache


class HistoryCache:
    """The rows of one ledger, read once and then only from where the last read stopped."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        """Forget every row: the next refresh reads the ledger from its first byte."""
        self.rows: list[MetricsRow] = []
        self.objects: list[dict[str, Any]] = []  # each row as history.jsonl holds it
        self.offsets: list[int] = []  # the byte offset after each row
        self.offset = 0
        self.errors: list[str] = []
        self.encoded: list[bytes] = []  # each row's JSON, encoded once
        self.keys: dict[str, None] = {}  # every metric key, in order of first appearance
        self.last_step: int | None = None
        self.updated: datetime | None = None
        self._index: HistoryIndex | None = None  # built when first asked for
        self._best: dict[tuple[str, str], BestStep] = {}

    @property
    def index(self) -> HistoryIndex:
        """Per-step means, as the policies keep them (built on first use, then kept current)."""
        if self._index is None:
            self._index = HistoryIndex(self.rows)
        return self._index

    def refresh(self) -> None:
        try:
            self._refresh()
        except OSError as error:  # unreadable: named, and the rest of the run still shows
            self.reset()
            where = self.run.root.location(self.run.file(HISTORY))
            self.errors.append(f"{where} cannot be read ({error})")

    def _refresh(self) -> None:
        path = self.run.file(HISTORY)
        stat = self.run.root.stat(path)
        size = 0 if stat is None else stat[0]
        if size < self.offset:  # replaced or cut: read it again from the top
            self.reset()
        if size == self.offset:
            return
        if self.errors:  # a damaged ledger is re-read whole each time it changes
            self.reset()
        try:
            rows, offset = self._read_since(path)
        except CorruptDataError:
            self._read_tolerant(path)
            return
        self._add(rows, offset)

    def _read_since(self, path: str) -> tuple[list[MetricsRow], int]:
        if self.run.root.local:
            history = JsonlHistory(self.run.base)
            return asyncio.run(history.rows_since(self.run.ref, self.offset))
        data = self.run.root.read_bytes(path) or b""
        return parse_lines(data[self.offset :], Path(path), self.offset, self.offset == 0)

    def _add(self, rows: list[MetricsRow], offset: int) -> None:
        # Rows from one read share its end offset: a cursor past them resumes after all.
        for row in rows:
            if supersedes(row):
                self._retire(row.step)
            obj = row.to_json()
            self.rows.append(row)
            self.objects.append(obj)
            self.encoded.append(encode(obj))
            self.offsets.append(offset)
            self.keys.update(dict.fromkeys(row.values))
            self.last_step = row.step if self.last_step is None else max(self.last_step, row.step)
            # the newest row in ledger order, not the latest stamp: a wall clock set back
            # an hour must not leave "last update" on a time before it was set back
            self.updated = row.recorded_at
            if self._index is not None:
                self._index.observe(row)
        self.offset = offset

    def _retire(self, step: int) -> None:
        """Drop the batch rows at `step` a marker just retired: the page shows only the batch
        that trained (a client that fetched them already keeps them until it reloads)."""
        keep = [
            i for i, row in enumerate(self.rows) if not (row.step == step and is_batch_row(row))
        ]
        if len(keep) == len(self.rows):
            return
        self.rows = [self.rows[i] for i in keep]
        self.objects = [self.objects[i] for i in keep]
        self.encoded = [self.encoded[i] for i in keep]
        self.offsets = [self.offsets[i] for i in keep]

    def _read_tolerant(self, path: str) -> None:
        """A ledger damaged in the middle: every line that is a row, and each bad line named."""
        self.reset()
        data = self.run.root.read_bytes(path) or b""
        position, number = 0, 0
        where = Path(self.run.root.location(path))
        while position < len(data):
            end = data.find(b"\n", position)
            number += 1
            if end < 0:  # a torn last line is not an error: a writer may be mid-line
                end = len(data)
                line = data[position:end]
                with contextlib.suppress(CorruptDataError):
                    rows, _ = parse_lines(line, where)
                    self._add(rows, end)
                break
            line = data[position : end + 1]
            try:
                rows, _ = parse_lines(line, where)
            except CorruptDataError as error:
                message = str(error).replace("line 1 of", f"line {number} of", 1)
                self.errors.append(message.splitlines()[0])
                rows = []
            self._add(rows, end + 1)
            position = end + 1
        self.offset = len(data)

    def start(self, cursor: int) -> int:
        """The index of the first row after byte `cursor` (a `next` value handed out before)."""
        return bisect.bisect_right(self.offsets, cursor) if cursor > 0 else 0

    def best(self, metric: str, direction: str) -> int | None:
        """The best step by `metric`, from one tracker per (metric, direction) that the index
        keeps current as rows arrive (as `delete_checkpoints` decides)."""
        key = (metric, direction)
        tracker = self._best.get(key)
        if tracker is None:
            tracker = self._best[key] = BestStep("min" if direction == "min" else "max")
            self.index.subscribe(metric, tracker)
        return tracker.step


def history_rows(catalog: Catalog, run: Run, keys: str | None, since: int | None) -> bytes:
    """The answer of the history endpoint, as JSON bytes."""
    if since is not None and since < 0:
        raise BadRequest(f"since must be a cursor >= 0 returned as 'next', got {since}")
    cache = history_of(catalog, run)
    patterns = [k.strip() for k in keys.split(",") if k.strip()] if keys else None
    with cache.lock:
        start = cache.start(since or 0)
        errors = list(cache.errors)
        cursor = cache.offset
        if patterns is None:  # every row: the JSON encoded when the row was read
            rows = b"[" + b",".join(cache.encoded[start:]) + b"]"
            tail = encode({"next": cursor, "errors": errors})
            return b'{"rows":' + rows + b"," + tail[1:]
        chosen_rows = list(zip(cache.rows[start:], cache.objects[start:]))
    out = []
    for row, obj in chosen_rows:
        chosen = [k for k in row.values if any(fnmatch.fnmatchcase(k, p) for p in patterns)]
        if not chosen:  # a row without any chosen key is left out, as `arthex history` does
            continue
        fixed = ("step", "training_step", "recorded_at")
        out.append({k: obj[k] for k in (*chosen, *fixed) if k in obj})
    return encode({"rows": out, "next": cursor, "errors": errors})
