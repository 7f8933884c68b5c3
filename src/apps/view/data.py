"""What the viewer shows, read from the files the library writes and never written back.

Each PATH given to `arthex view` is a base path (`.art`), a project directory, one model
directory, or an object-store URI the trajectory store reads (`s3://bucket/runs`). The runs
below it are found with `RunLayout`'s markers and known by `project/name`; a request names a
run that way and nothing else, so no path from a URL reaches the filesystem.

The readers are the library's:

- history: `JsonlHistory.rows_since` (the ledger's shared lock, its torn-last-line rule), or
  `parse_lines` over the bytes of a ledger on an object store;
- trajectories: the store's `list_parts` and `open_part`, rows decoded by its `decode`; a page
  of groups reads only the row groups that hold them and only the authoritative columns;
- checkpoints: the LocalBackend's `complete_steps`, the Tinker record, the retention rule
  (`retention.decide`) fed by `HistoryIndex`/`BestStep` as `delete_checkpoints` is;
- the pipeline record: `PipelineRecord.from_json`; the lease: `current_holder`.

A damaged file never hides the rest: the answer carries `errors`, one line each, naming it.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import fnmatch
import json
import math
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import attrs
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ...adapters.files import disk_use
from ...adapters.jsonl_history import JsonlHistory, parse_lines
from ...adapters.layout import (
    CHECKPOINTS,
    HISTORY,
    LEASE,
    MARKERS,
    MODEL_SPEC,
    MODELS,
    PIPELINE_STATE,
    TINKER_RUN,
    TRAJECTORIES,
    RunLayout,
    is_step_name,
)
from ...adapters.parquet.decoding import decode, open_part
from ...adapters.parquet.object_store import read_file
from ...adapters.parquet.schema import AUTHORITATIVE
from ...adapters.parquet.store import list_parts, resolve_root
from ...core.advantages import group_advantages
from ...core.chat_types import content_text
from ...core.errors import ArthexError, CorruptDataError, InvalidInputError
from ...core.history_index import HistoryIndex
from ...core.identity import RunRef, validate_name
from ...core.metrics import MetricsRow
from ...core.pipeline_record import DISCARD_REASONS, PipelineRecord
from ...core.retention import BestStep, decide
from ...core.training_row import is_batch_row, supersedes
from ...core.trajectories import Trajectory, TrajectoryGroup

DEFAULT_METRICS = ("val/reward", "train/reward")
MAX_PAGE = 200


class NotFound(ArthexError):
    """A run, split or step the request names is not there (HTTP 404)."""


class BadRequest(InvalidInputError):
    """A request parameter out of range or malformed (HTTP 400)."""


# --- where runs live ----------------------------------------------------------------------------


@attrs.frozen
class Root:
    """One PATH: a filesystem and the path within it, and what kind of place it is."""

    given: str
    filesystem: pafs.FileSystem
    path: str

    @property
    def local(self) -> bool:
        return bool(self.filesystem.type_name == "local")

    @classmethod
    def of(cls, given: str) -> Root:
        if "://" not in given and not Path(given).is_dir():
            raise InvalidInputError(
                f"{given!r} is not a directory; pass a base path (.art), a project directory, "
                "a model directory or a URI such as s3://bucket/runs"
            )
        filesystem, path = resolve_root(given)
        return cls(given, filesystem, path)

    def is_dir(self, path: str) -> bool:
        if self.local:
            return os.path.isdir(path)
        return bool(self.filesystem.get_file_info(path).type == pafs.FileType.Directory)

    def children(self, path: str) -> list[str]:
        """Names of the directories in `path` (none when it is absent)."""
        if self.local:
            try:
                return sorted(e.name for e in os.scandir(path) if e.is_dir())
            except (FileNotFoundError, NotADirectoryError):
                return []
        selector = pafs.FileSelector(path, allow_not_found=True)
        infos = self.filesystem.get_file_info(selector)
        return sorted(i.base_name for i in infos if i.type == pafs.FileType.Directory)

    def exists(self, path: str) -> bool:
        if self.local:
            return os.path.exists(path)
        return bool(self.filesystem.get_file_info(path).type != pafs.FileType.NotFound)

    def is_run_dir(self, path: str) -> bool:
        return self.is_dir(path) and any(self.exists(f"{path}/{m}") for m in MARKERS)

    def read_bytes(self, path: str) -> bytes | None:
        return read_file(self.filesystem, path, local=self.local)

    def stat(self, path: str) -> tuple[int, int] | None:
        """(size, mtime in ns) of a file, None when absent: what caches key on."""
        if self.local:
            try:
                st = os.stat(path)
            except (FileNotFoundError, NotADirectoryError):
                return None
            return st.st_size, st.st_mtime_ns
        info = self.filesystem.get_file_info(path)
        if info.type == pafs.FileType.NotFound:
            return None
        return int(info.size or 0), int(info.mtime_ns or 0)

    def location(self, path: str) -> str:
        if self.local:
            return path
        return f"{self.filesystem.type_name}://{path}"

    def runs(self) -> list[tuple[RunRef, str]]:
        """(run, base) of every run at or below this root."""
        path = self.path.rstrip("/") or "/"
        if self.is_run_dir(path):
            parent, name = _split(path)
            grand, models = _split(parent)
            base, project = _split(grand)
            with contextlib.suppress(InvalidInputError):
                if models == MODELS:
                    return [(RunRef(project=project, name=name), base)]
            raise InvalidInputError(
                f"{self.given!r} is a model directory outside the standard layout "
                f"({{base}}/{{project}}/{MODELS}/{{name}}); pass its base path instead"
            )
        if self.is_dir(f"{path}/{MODELS}"):  # a project directory
            base, project = _split(path)
            return self._models(base, [project])
        return self._models(path, self.children(path))

    def _models(self, base: str, projects: Iterable[str]) -> list[tuple[RunRef, str]]:
        found = []
        for project in projects:
            for name in self.children(f"{base}/{project}/{MODELS}"):
                try:
                    run = RunRef(project=project, name=name)
                except InvalidInputError:
                    continue
                if self.is_run_dir(RunLayout.of(base, run).uri):
                    found.append((run, base))
        return found


def _split(path: str) -> tuple[str, str]:
    head, _, tail = path.rstrip("/").rpartition("/")
    return head, tail


@attrs.frozen
class Run:
    """A run the viewer found: its names, its root and its directory within that root."""

    ref: RunRef
    root: Root
    base: str

    @property
    def dir(self) -> str:
        return RunLayout.of(self.base, self.ref).uri

    def file(self, name: str) -> str:
        return f"{self.dir}/{name}"


class Catalog:
    """The runs under the PATHs, found again on each listing (a new run appears live)."""

    def __init__(self, paths: Sequence[str]) -> None:
        if not paths:
            raise InvalidInputError("give at least one PATH")
        self.roots = [Root.of(os.fspath(p)) for p in paths]
        self._history: dict[str, _HistoryCache] = {}
        self._lock = threading.Lock()

    def runs(self) -> list[Run]:
        found: dict[RunRef, Run] = {}
        for root in self.roots:
            for ref, base in root.runs():
                found.setdefault(ref, Run(ref, root, base))  # the first PATH wins a name
        return sorted(found.values(), key=lambda r: (r.ref.project, r.ref.name))

    def run(self, project: str, name: str) -> Run:
        """The run named by a URL; names are validated as path segments first."""
        try:
            ref = RunRef(project=project, name=name)
        except InvalidInputError as error:
            raise BadRequest(str(error)) from error
        for root in self.roots:
            for candidate, base in root.runs():
                if candidate == ref:
                    return Run(ref, root, base)
        raise NotFound(f"no run {project}/{name} under the viewed paths")

    # --- history --------------------------------------------------------------------------

    def history(self, run: Run) -> _HistoryCache:
        """The run's parsed ledger, brought up to date with the rows appended since."""
        key = run.file(HISTORY)
        with self._lock:
            cache = self._history.get(key)
            if cache is None:
                cache = self._history[key] = _HistoryCache(run)
        with cache.lock:
            cache.refresh()
        return cache


class _HistoryCache:
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
    cache = catalog.history(run)
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


def encode(value: Any) -> bytes:
    """JSON as the API answers it (the values are already JSON values)."""
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text.encode()


# --- runs ---------------------------------------------------------------------------------------


def run_summary(catalog: Catalog, run: Run, metric: str | None, direction: str) -> dict[str, Any]:
    errors: list[str] = []
    cache = catalog.history(run)
    with cache.lock:
        errors.extend(cache.errors)
        last_step, updated, keys, rows = (
            cache.last_step,
            cache.updated,
            list(cache.keys),
            len(cache.rows),
        )
        best = None
        for key in [metric] if metric else list(DEFAULT_METRICS):
            at = cache.best(key, direction)
            if at is not None:
                value = cache.index.step_means(key)[at]
                best = {"metric": key, "direction": direction, "step": at, "value": value}
                break
    found = checkpoint_steps(run, errors)
    step = found["latest"] if found["latest"] is not None else last_step
    spec = _json_file(run, MODEL_SPEC, errors)
    return {
        "project": run.ref.project,
        "name": run.ref.name,
        "path": run.root.location(run.dir),
        "step": step,
        "updated": None if updated is None else updated.isoformat(),
        "rows": rows,
        "keys": keys,
        "best": best,
        "checkpoints": len(found["steps"]),
        "checkpoints_where": found["where"],
        "checkpoints_expired": len(found.get("expired", [])),
        "lease": lease(run),
        "splits": splits(run, errors),
        "base_model": spec.get("base_model") if spec else None,
        "errors": errors,
    }


def _json_file(run: Run, name: str, errors: list[str]) -> dict[str, Any] | None:
    path = run.file(name)
    try:
        data = run.root.read_bytes(path)
    except OSError as error:  # unreadable (permissions, a folder, I/O): named, the rest shows
        errors.append(f"{run.root.location(path)} cannot be read ({error})")
        return None
    if data is None:
        return None
    try:
        value = json.loads(data)
    except ValueError as error:
        errors.append(f"{run.root.location(path)} is not JSON ({error})")
        return None
    if not isinstance(value, dict):
        errors.append(f"{run.root.location(path)} holds {type(value).__name__}, not an object")
        return None
    return value


def lease(run: Run) -> dict[str, Any] | None:
    """Who the trainer lease names, and whether that process is alive on this host.

    The lock is never tried (even a shared one would make a starting trainer's take fail);
    the holder's pid is checked instead, which is what can be known without touching it."""
    if not run.root.local:
        return None
    from ...adapters.run_files.lease import current_holder

    holder = current_holder(Path(run.file(LEASE)))
    if holder is None:
        return None
    alive: bool | None = None
    if holder.host == _hostname():
        try:
            os.kill(holder.pid, 0)
            alive = True
        except (ProcessLookupError, OverflowError, ValueError):  # gone, or no pid at all
            alive = False
        except PermissionError:
            alive = True
    return {"holder": holder.describe(), "pid": holder.pid, "host": holder.host, "alive": alive}


def _hostname() -> str:
    import socket

    return socket.gethostname()


def splits(run: Run, errors: list[str] | None = None) -> dict[str, list[int]]:
    """Every split with its logged steps, as the store lists them."""
    try:
        parts = list_parts(run.root.filesystem, run.file(TRAJECTORIES))
    except (OSError, ArthexError) as error:
        if errors is not None:
            errors.append(f"{run.root.location(run.file(TRAJECTORIES))}: {error}")
        return {}
    found: dict[str, set[int]] = {}
    for part in parts:
        found.setdefault(part.split, set()).add(part.step)
    return {split: sorted(steps) for split, steps in sorted(found.items())}


# --- checkpoints --------------------------------------------------------------------------------


def checkpoint_steps(run: Run, errors: list[str]) -> dict[str, Any]:
    """{"where", "steps", "latest", "incomplete"} (and "expired" for a Tinker run: steps the
    service expired, not errors): complete checkpoints as the backend counts."""
    root = run.root
    if root.local:
        directory = Path(run.dir)
        if (directory / TINKER_RUN).is_file():
            from ...adapters.tinker.record import read_record

            try:
                record = read_record(directory)
            except ArthexError as error:
                errors.append(str(error).splitlines()[0])
                record = None
            if record is not None:
                return {
                    "where": "tinker",
                    "steps": record.sampler_steps(),
                    "latest": record.step,
                    "incomplete": [],
                    "expired": list(record.expired),
                }
        from ...adapters.local import checkpoints as ckpt

        steps = ckpt.complete_steps(directory)
        loose = [s for s in ckpt.step_folders(directory) if s not in steps]
        return {
            "where": "run" if steps else "none",
            "steps": steps,
            "latest": steps[-1] if steps else None,
            "incomplete": loose,
        }
    names = [n for n in root.children(run.file(CHECKPOINTS)) if is_step_name(n)]
    steps = sorted(int(n) for n in names)
    return {
        "where": "run" if steps else "none",
        "steps": steps,
        "latest": steps[-1] if steps else None,
        "incomplete": [],
    }


def checkpoints(
    catalog: Catalog, run: Run, metric: str | None, direction: str, keep_last: int
) -> dict[str, Any]:
    if direction not in ("max", "min"):
        raise BadRequest(f"direction must be max or min, got {direction!r}")
    if keep_last < 1:
        raise BadRequest(f"keep_last must be >= 1, got {keep_last}")
    errors: list[str] = []
    found = checkpoint_steps(run, errors)
    cache = catalog.history(run)
    with cache.lock:
        errors.extend(cache.errors)
        chosen, best = metric, None
        for key in [metric] if metric else list(DEFAULT_METRICS):
            best = cache.best(key, direction)
            if best is not None:
                chosen = key
                break
        means = cache.index.step_means(chosen) if chosen else {}
    latest = found["latest"]
    decision = None
    if latest is not None:
        decision = decide(
            best,
            latest=latest,
            metric=chosen or DEFAULT_METRICS[0],
            direction="min" if direction == "min" else "max",
            keep_last=keep_last,
        )
    rows = []
    for step in found["steps"]:
        why = []
        if step == latest:
            why.append("latest")
        if latest is not None and latest - keep_last < step < latest:
            why.append(f"last {keep_last}")
        if step == best:
            why.append(f"best {chosen}")
        entry: dict[str, Any] = {
            "step": step,
            "metric": means.get(step),
            "kept": decision is None or step in decision.keep,
            "why": why,
        }
        if run.root.local and found["where"] == "run":
            entry["bytes"] = disk_use(Path(run.dir) / CHECKPOINTS / f"{step:04d}")
        rows.append(entry)
    for step in found.get("expired", []):
        rows.append({"step": step, "metric": means.get(step), "expired": True, "why": []})
    rows.sort(key=lambda row: int(row["step"]))
    return {
        "checkpoints": rows,
        "where": found["where"],
        "incomplete": found["incomplete"],
        "metric": chosen,
        "direction": direction,
        "best_step": best,
        "retention": None if decision is None else decision.reason,
        "pipeline": pipeline(run, errors),
        "errors": errors,
    }


def pipeline(run: Run, errors: list[str]) -> dict[str, Any] | None:
    data = _json_file(run, PIPELINE_STATE, errors)
    if data is None:
        return None
    where = run.root.location(run.file(PIPELINE_STATE))
    try:
        record = PipelineRecord.from_json(data, where=where)
    except ArthexError as error:
        errors.append(str(error).splitlines()[0])
        return None
    return {
        "step": record.step,
        "offset": record.offset,
        "trained_groups": record.trained_groups,
        "pending": len(record.pending),
        "discarded": {r: record.discarded_count(r) for r in DISCARD_REASONS},
        "in_flight": None if record.in_flight is None else record.in_flight.step,
        "last_eval_step": record.last_eval_step,
        "best_eval": None if record.best_eval is None else list(record.best_eval),
        "totals": dict(record.totals),
    }


# --- trajectories -------------------------------------------------------------------------------


@attrs.frozen
class _Part:
    """One part file's groups: where its row groups start and end, in group indexes."""

    path: str
    groups: int  # how many groups the part holds
    row_groups: tuple[tuple[int, int], ...]  # (first, last) group index of each row group


def trajectories(
    run: Run,
    split: str | None,
    step: int | None,
    offset: int,
    limit: int,
    query: str | None = None,
) -> dict[str, Any]:
    if offset < 0:
        raise BadRequest(f"offset must be >= 0, got {offset}")
    if not 1 <= limit <= MAX_PAGE:
        raise BadRequest(f"limit must be between 1 and {MAX_PAGE}, got {limit}")
    errors: list[str] = []
    logged = splits(run, errors)
    if split is None:
        split = "train" if "train" in logged else next(iter(logged), None)
    else:
        try:
            validate_name(split, "split")
        except InvalidInputError as error:
            raise BadRequest(str(error)) from error
    steps = logged.get(split, []) if split is not None else []
    if step is None:
        step = steps[-1] if steps else None
    elif step < 0:
        raise BadRequest(f"step must be >= 0, got {step}")
    answer: dict[str, Any] = {
        "split": split,
        "step": step,
        "splits": logged,
        "offset": offset,
        "limit": limit,
        "total": 0,
        "groups": [],
        "errors": errors,
    }
    if split is None or step is None:
        return answer
    if step not in steps:
        raise NotFound(f"no {split!r} trajectories at step {step} in {run.ref}")
    directory = f"{run.file(TRAJECTORIES)}"
    fs = run.root.filesystem
    for part in list_parts(fs, directory, split, step):
        where = run.root.location(part.path)
        try:
            with open_part(part.path, fs) as (file, _):
                indexed = _index(part.path, file)
                chosen = _matching(file, query) if query else None
                _page(answer, where, file, indexed, chosen)
        except (CorruptDataError, OSError, pa.ArrowException) as error:
            text = str(error).splitlines()[0] if str(error) else type(error).__name__
            errors.append(text if where in text else f"{where}: {text}")
    answer.pop("_seen", None)
    return answer


def _index(path: str, file: pq.ParquetFile) -> _Part:
    """The group index range of each row group, from the footer's statistics when it has
    them, else from the `group_index` column alone."""
    names = file.schema_arrow.names
    missing = [c for c in AUTHORITATIVE if c not in names]
    if missing:
        raise CorruptDataError(f"{path} lacks the column(s) {', '.join(missing)}")
    column = names.index("group_index")
    ranges = []
    for i in range(file.num_row_groups):
        meta = file.metadata.row_group(i)
        if meta.num_rows == 0:
            ranges.append((0, -1))
            continue
        stats = meta.column(column).statistics
        if stats is not None and stats.has_min_max and stats.null_count == 0:
            ranges.append((int(stats.min), int(stats.max)))
            continue
        values = file.read_row_group(i, columns=["group_index"]).column(0)
        low, high = pc.min(values).as_py(), pc.max(values).as_py()
        if low is None or high is None:
            raise CorruptDataError(f"{path}: row group {i} has no group_index")
        ranges.append((int(low), int(high)))
    total = max((high for _, high in ranges), default=-1) + 1
    return _Part(path, total, tuple(ranges))


def _matching(file: pq.ParquetFile, query: str) -> list[int]:
    """Group indexes whose group or trajectory JSON contains `query` (any case), streamed
    batch by batch over two columns."""
    needle = json.dumps(query, ensure_ascii=False)[1:-1]  # as the text appears inside JSON
    found: set[int] = set()
    columns = ["group_index", "trajectory_json", "group_json"]
    for batch in file.iter_batches(batch_size=256, columns=columns):
        hits = pc.or_kleene(
            pc.match_substring(batch.column(1), needle, ignore_case=True),
            pc.match_substring(batch.column(2), needle, ignore_case=True),
        )
        found.update(v for v in pc.filter(batch.column(0), pc.fill_null(hits, False)).to_pylist())
    return sorted(found)


def _page(
    answer: dict[str, Any],
    where: str,
    file: pq.ParquetFile,
    part: _Part,
    chosen: list[int] | None,
) -> None:
    """Add this part's share of the page to `answer` (parts follow one another in order)."""
    first_global = answer.setdefault("_seen", 0)
    candidates = chosen if chosen is not None else range(part.groups)
    count = len(candidates)
    answer["_seen"] = first_global + part.groups
    start = answer["offset"] - answer["total"]
    room = answer["limit"] - len(answer["groups"])
    answer["total"] += count
    if room <= 0 or start >= count:
        return
    wanted = list(candidates[max(0, start) : max(0, start) + room])
    if not wanted:
        return
    low, high = wanted[0], wanted[-1]
    row_groups = [i for i, (a, b) in enumerate(part.row_groups) if a <= high and b >= low]
    table = file.read_row_groups(row_groups, columns=AUTHORITATIVE)
    mask = pc.is_in(table.column("group_index"), value_set=pa.array(wanted, pa.int64()))
    table = table.filter(mask)
    order = {g: i for i, g in enumerate(wanted)}
    renumbered = pa.array([order[g] for g in table.column("group_index").to_pylist()], pa.int64())
    table = table.set_column(AUTHORITATIVE.index("group_index"), "group_index", renumbered)
    for g, group in zip(wanted, decode(where, table)):
        answer["groups"].append(group_json(first_global + g, group))


def group_json(index: int, group: TrajectoryGroup) -> dict[str, Any]:
    rewards = [t.reward for t in group.trajectories]
    advantages = group_advantages(rewards)
    return {
        "index": index,
        "metadata": _jsonable(group.metadata),
        "metrics": _jsonable(group.metrics),
        "logs": list(group.logs),
        "exceptions": [
            {"type": e.type, "message": e.message, "traceback": e.traceback}
            for e in group.exceptions
        ],
        "trajectories": [
            trajectory_json(t, trajectory, advantage)
            for t, (trajectory, advantage) in enumerate(zip(group.trajectories, advantages))
        ],
    }


def trajectory_json(index: int, trajectory: Trajectory, advantage: float) -> dict[str, Any]:
    histories = [
        {"messages": [message_json(m) for m in h.messages_and_choices]}
        for h in trajectory.additional_histories
    ]
    if trajectory.exchanges:
        from ...core.capture.conversations import conversations

        found = conversations(trajectory)
        messages = [message_json(m) for m in found[0].messages] if found else []
        histories += [{"messages": [message_json(m) for m in c.messages]} for c in found[1:]]
        tools: Any = trajectory.tools
    else:
        messages = [message_json(m) for m in trajectory.messages_and_choices]
        tools = trajectory.tools
    return {
        "index": index,
        "reward": trajectory.reward,
        "advantage": advantage,
        "metrics": _jsonable(trajectory.metrics),
        "metadata": _jsonable(trajectory.metadata),
        "logs": list(trajectory.logs),
        "tools": [_tool_name(t) for t in tools or []],
        "messages": messages,
        "additional_histories": histories,
        "captured": bool(trajectory.exchanges),
    }


def _tool_name(tool: Any) -> str:
    if isinstance(tool, Mapping):
        inner = tool.get("function") or tool
        if isinstance(inner, Mapping):
            return str(inner.get("name", "?"))
    return "?"


def message_json(item: Any) -> dict[str, Any]:
    """A message or a Choice as the page shows it: role, text, tool calls, and for a Choice
    (the model's own, trainable turn) its sampled tokens with their logprobs when it has them."""
    from openai.types.chat.chat_completion import Choice

    if isinstance(item, Choice):
        message = item.message
        out: dict[str, Any] = {
            "role": message.role,
            "content": message.content or "",
            "trainable": True,
            "tool_calls": [
                {
                    "id": call.id,
                    "name": getattr(getattr(call, "function", None), "name", "?"),
                    "arguments": getattr(getattr(call, "function", None), "arguments", ""),
                }
                for call in message.tool_calls or []
            ],
        }
        if item.logprobs is not None and item.logprobs.content:
            out["tokens"] = [
                {"token": t.token, "logprob": _finite(t.logprob)} for t in item.logprobs.content
            ]
        return out
    data = item if isinstance(item, Mapping) else {}
    calls = []
    for call in data.get("tool_calls") or []:
        function = call.get("function") or {} if isinstance(call, Mapping) else {}
        calls.append(
            {
                "id": call.get("id") if isinstance(call, Mapping) else None,
                "name": str(function.get("name", "?")),
                "arguments": content_text(function.get("arguments")),
            }
        )
    return {
        "role": str(data.get("role", "?")),
        "content": content_text(data.get("content")),
        "trainable": False,
        "tool_calls": calls,
        "tool_call_id": data.get("tool_call_id"),
        "name": data.get("name"),
    }


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _jsonable(values: Mapping[str, Any]) -> dict[str, Any]:
    return {
        k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in values.items()
    }
