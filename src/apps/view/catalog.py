"""Where the viewer finds runs: each PATH given to `arthex view` is a base path (`.art`), a
project directory, one model directory, or an object-store URI the trajectory store reads
(`s3://bucket/runs`). The runs below it are found with `RunLayout`'s markers and known by
`project/name`; a request names a run that way and nothing else, so no path from a URL reaches
the filesystem.

The viewer's readers, one module each by what they read, never write: `history`, `runs`,
`checkpoints`, `trajectories`. A damaged file never hides the rest: an answer carries
`errors`, one line each, naming it.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import attrs
import pyarrow.fs as pafs

from ...adapters.layout import (
    MARKERS,
    MODELS,
    RunLayout,
)
from ...adapters.parquet.object_store import read_file
from ...adapters.parquet.store import resolve_root
from ...core.errors import ArthexError, InvalidInputError
from ...core.identity import RunRef

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
        # each run's parsed ledger, by its file (history.py's `history_of` keeps them)
        self.histories: dict[str, Any] = {}
        self.lock = threading.Lock()

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


def encode(value: Any) -> bytes:
    """JSON as the API answers it (the values are already JSON values)."""
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text.encode()


def json_file(run: Run, name: str, errors: list[str]) -> dict[str, Any] | None:
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
