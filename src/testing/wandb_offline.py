"""Reading a wandb offline run back: what `wandb sync` would upload; and the environment
that keeps the SDK offline and inside a test's own folder (`sandbox_environment`).

The SDK ships no reader for its `.wandb` transaction logs; tests use this one to prove what
the WandbReporter logged (keys, values, the x-axis, config), not only that a call happened.
"""

from __future__ import annotations

import importlib
import json
import struct
import time
import zlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

import attrs

from ..adapters.wandb_reporter import X_AXIS
from ..core.errors import CorruptDataError
from ..core.metrics import MetricsRow


class EnvironmentPatch(Protocol):
    """What `sandbox_environment` changes the environment through (pytest's MonkeyPatch)."""

    def setenv(self, name: str, value: str) -> None: ...

    def delenv(self, name: str, raising: bool = True) -> None: ...


def sandbox_environment(patch: EnvironmentPatch, home: Path, *, offline: bool = True) -> None:
    """Every folder the SDK writes (config, cache, data, artifacts) under `home`, no console
    output, git, code or system stats collected; `WANDB_DIR` unset (each run names its
    own); and offline mode, or with `offline=False` `WANDB_MODE` unset (the caller's runs
    say their mode)."""
    for name in ("CONFIG", "CACHE", "DATA", "ARTIFACT"):
        patch.setenv(f"WANDB_{name}_DIR", str(home / name.lower()))
    for name in ("SILENT", "DISABLE_GIT", "DISABLE_CODE", "X_DISABLE_STATS"):
        patch.setenv(f"WANDB_{name}", "true")
    patch.delenv("WANDB_DIR", raising=False)
    if offline:
        patch.setenv("WANDB_MODE", "offline")
    else:
        patch.delenv("WANDB_MODE", raising=False)


_LOG_HEADER = struct.Struct("<4sHB")
_LOG_IDENT, _LOG_MAGIC, _LOG_VERSION = b":W&B", 0xBEE1, 0
_RECORD_HEADER = struct.Struct("<IHB")
_BLOCK = 32 * 1024
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


@attrs.frozen
class OfflineArtifactFile:
    """One file of a logged artifact: its path in the artifact, the staged copy `wandb sync`
    uploads, its size and its digest (base64 of the file's MD5)."""

    path: str
    local_path: Path
    size: int
    digest: str


@attrs.frozen
class OfflineArtifact:
    """An artifact the run logged, as its record in the transaction log holds it."""

    name: str
    type: str
    aliases: tuple[str, ...]
    metadata: Mapping[str, Any]
    storage_policy_config: Mapping[str, Any]
    files: tuple[OfflineArtifactFile, ...]


@attrs.frozen
class OfflineRun:
    """What one offline run folder holds, as `wandb sync` would upload it."""

    path: Path
    run_id: str
    resume: bool  # init asked to resume ("allow" or "must")
    history: tuple[Mapping[str, Any], ...]
    metrics: tuple[Mapping[str, str], ...]
    config: Mapping[str, Any]
    finished: bool  # the run's exit record is written: nothing more will come
    display_name: str = ""
    entity: str = ""
    project: str = ""
    artifacts: tuple[OfflineArtifact, ...] = ()

    def rows(self) -> list[MetricsRow]:
        """The history as metric rows (wandb's own `_step`, `_runtime`, ... left out)."""
        rows = []
        for item in self.history:
            values = {
                key: value
                for key, value in item.items()
                if key != X_AXIS
                and not key.startswith("_")
                and (
                    value is None
                    or (isinstance(value, int | float) and not isinstance(value, bool))
                )
            }
            rows.append(MetricsRow(step=int(item[X_AXIS]), values=values))
        return rows


def offline_run_dirs(directory: str | Path) -> list[Path]:
    """The `offline-run-*` folders under `directory/wandb`, oldest first: the order to sync."""
    base = Path(directory) / "wandb"
    return sorted(path for path in base.glob("offline-run-*") if path.is_dir())


def read_offline_run(run_dir: str | Path, *, wait: float = 0.0) -> OfflineRun:
    """Read an offline run's transaction log (`run-<id>.wandb`): a 7-byte header, then wandb
    `Record` protobufs in CRC-checked records laid out in 32 KiB blocks.

    wandb's service writes the log in the background: right after `finish()` (or `close()`)
    returns, the last records may still be on their way. `wait` gives it that many seconds to
    write the run's exit record; check `finished` on the result.
    """
    deadline = time.monotonic() + wait
    while True:
        found = _parse_offline_run(Path(run_dir))
        if found.finished or time.monotonic() >= deadline:
            return found
        time.sleep(0.02)


def _parse_offline_run(run_dir: Path) -> OfflineRun:
    pb = importlib.import_module("wandb.proto.wandb_internal_pb2")
    logs = sorted(run_dir.glob("run-*.wandb"))
    if len(logs) != 1:
        raise CorruptDataError(f"{run_dir} holds {len(logs)} run-*.wandb files, expected 1")
    run_id, resume, finished = "", False, False
    history: list[dict[str, Any]] = []
    metrics: list[dict[str, str]] = []
    config: dict[str, Any] = {}
    names = {"display_name": "", "entity": "", "project": ""}
    artifacts: list[OfflineArtifact] = []
    for payload in _log_records(logs[0]):
        record = pb.Record()
        record.ParseFromString(payload)
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run_id, resume = record.run.run_id, bool(record.run.resume)
            names = {key: str(getattr(record.run, key)) for key in names}
            config.update(_items(record.run.config.update))
        elif kind == "config":
            config.update(_items(record.config.update))
        elif kind == "history":
            history.append(_items(record.history.item))
        elif kind == "metric":
            metric = record.metric
            metrics.append(
                {
                    "name": metric.name,
                    "glob_name": metric.glob_name,
                    "step_metric": metric.step_metric,
                }
            )
        elif kind == "artifact":
            artifacts.append(_artifact(record.artifact))
        elif kind == "exit":
            finished = True
    return OfflineRun(
        path=run_dir,
        run_id=run_id,
        resume=resume,
        history=tuple(history),
        metrics=tuple(metrics),
        config=config,
        finished=finished,
        display_name=names["display_name"],
        entity=names["entity"],
        project=names["project"],
        artifacts=tuple(artifacts),
    )


def _artifact(record: Any) -> OfflineArtifact:
    manifest = record.manifest
    return OfflineArtifact(
        name=record.name,
        type=record.type,
        aliases=tuple(record.aliases),
        metadata=json.loads(record.metadata) if record.metadata else {},
        storage_policy_config={
            item.key: json.loads(item.value_json) for item in manifest.storage_policy_config
        },
        files=tuple(
            OfflineArtifactFile(
                path=entry.path,
                local_path=Path(entry.local_path),
                size=int(entry.size),
                digest=entry.digest,
            )
            for entry in manifest.contents
        ),
    )


def _items(items: Any) -> dict[str, Any]:
    """Items keyed by `key`, or by a `nested_key` path (how the SDK sends a logged object's
    fields, e.g. a table's `path`): rebuilt as nested dicts."""
    out: dict[str, Any] = {}
    for item in items:
        path = [item.key] if item.key else list(item.nested_key)
        target = out
        for part in path[:-1]:
            target = target.setdefault(part, {})
        target[path[-1]] = json.loads(item.value_json)
    return out


def _log_records(path: Path) -> Iterator[bytes]:
    data = path.read_bytes()
    if len(data) < _LOG_HEADER.size or _LOG_HEADER.unpack_from(data) != (
        _LOG_IDENT,
        _LOG_MAGIC,
        _LOG_VERSION,
    ):
        raise CorruptDataError(f"{path} is not a wandb transaction log this reader knows")
    position = _LOG_HEADER.size
    pending = b""
    while position + _RECORD_HEADER.size <= len(data):
        left_in_block = _BLOCK - position % _BLOCK
        if left_in_block < _RECORD_HEADER.size:  # zero padding at a block's end
            position += left_in_block
            continue
        checksum, length, kind = _RECORD_HEADER.unpack_from(data, position)
        body = data[position + _RECORD_HEADER.size : position + _RECORD_HEADER.size + length]
        if len(body) < length:
            break  # a record still being written: stop at the last whole one
        position += _RECORD_HEADER.size + length
        if kind == 0 and length == 0:
            continue
        if zlib.crc32(body, zlib.crc32(bytes([kind]))) != checksum:
            raise CorruptDataError(f"{path}: checksum mismatch at byte {position}")
        if kind == _FULL:
            yield body
        elif kind == _FIRST:
            pending = body
        elif kind == _MIDDLE:
            pending += body
        elif kind == _LAST:
            yield pending + body
            pending = b""
        else:
            raise CorruptDataError(f"{path}: unknown record type {kind} at byte {position}")


def finished_runs(model_dir: str | Path, *, wait: float = 10.0) -> list[OfflineRun]:
    """A model's offline runs, oldest first, once wandb's service has written them out."""
    found = [read_offline_run(path, wait=wait) for path in offline_run_dirs(model_dir)]
    unfinished = [run.path for run in found if not run.finished]
    if unfinished:
        raise CorruptDataError(f"wandb never wrote the exit records of {unfinished}")
    return found
