"""Part files of a trajectory split: their names, listing them, and reading one step whole.

Every group logged at (split, step) lives in the step file `{step:04d}.parquet`, the one name
ART's loaders read. Earlier arthex versions wrote each further log at a step as an extra part
`{step:04d}-1.parquet`, `-2`, ...; those are still read, after the step file, in their order.
The first new write at such a step folds them into the step file (step_file.py) and
records what it folded in the step file's footer, under `FOLDED_KEY`: a JSON list of each
folded part's name, size and a hash of its last bytes. The parts are deleted right after the
step file is replaced; if the writer dies in between, readers skip every part the step file
says it holds, so nothing is read twice, and the next writer deletes them.

The identity check (size and tail hash, not the name alone) keeps a part that an older arthex
wrote under a reused name after the fold from being mistaken for the folded one.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable
from typing import Any, NamedTuple

import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ...core.errors import CorruptDataError, InvalidInputError
from ...core.identity import validate_name
from ...core.trajectories import TrajectoryGroup
from ..files import TEMP_PREFIX
from ..layout import step_name
from .decoding import open_part, read_open_part

__all__ = [
    "FOLDED_KEY",
    "WRITES_KEY",
    "PartFile",
    "folded_parts",
    "list_dir",
    "list_parts",
    "parse_part_name",
    "part_identity",
    "part_name",
    "read_step",
    "read_tail",
]

FOLDED_KEY = b"arthex.folded_parts"
"""Step-file footer key: the legacy `-N` parts whose groups the step file holds."""
WRITES_KEY = b"arthex.writes"
"""Step-file footer key: a token per write whose groups the step file holds (a writer on an
object store checks its own token to know its groups made it in)."""

_PART_NAME = re.compile(r"([0-9]+)(?:-([1-9][0-9]*))?\.parquet")
_TAIL_BYTES = 64 * 1024
_READ_ATTEMPTS = 5


class PartFile(NamedTuple):
    """A published part: its split, step and part number (0 for the step file `0003.parquet`,
    n for a legacy `0003-n.parquet`), and its path within the store's filesystem."""

    split: str
    step: int
    part: int
    path: str


def part_name(step: int, part: int = 0) -> str:
    return f"{step_name(step)}.parquet" if part == 0 else f"{step_name(step)}-{part}.parquet"


def parse_part_name(name: str) -> tuple[int, int] | None:
    """(step, part) of a part file's name, else None (temp files, `12.parquet`,
    `0008-0.parquet`, the lock file and any other name are not parts)."""
    if name.startswith(TEMP_PREFIX):
        return None
    match = _PART_NAME.fullmatch(name)
    if match is None:
        return None
    step = int(match.group(1))
    if f"{step:04d}" != match.group(1):
        return None
    return step, int(match.group(2) or 0)


def list_dir(filesystem: pafs.FileSystem, directory: str) -> list[pafs.FileInfo]:
    """The entries of `directory` (none when it does not exist)."""
    if filesystem.type_name == "local":  # scandir: one system call, no stat per entry
        try:
            entries = list(os.scandir(directory))
        except (FileNotFoundError, NotADirectoryError):
            return []
        return [
            pafs.FileInfo(
                entry.path,
                pafs.FileType.Directory
                if entry.is_dir()
                else pafs.FileType.File
                if entry.is_file()
                else pafs.FileType.Unknown,
            )
            for entry in entries
        ]
    selector = pafs.FileSelector(directory, allow_not_found=True)
    return list(filesystem.get_file_info(selector))


def step_parts(
    filesystem: pafs.FileSystem, directory: str, split: str, step: int
) -> list[PartFile]:
    """Every part file of one step in a split directory, folded or not, by part number."""
    found = []
    for info in list_dir(filesystem, directory):
        parsed = parse_part_name(info.base_name)
        if parsed is not None and parsed[0] == step and info.type == pafs.FileType.File:
            found.append(PartFile(split, step, parsed[1], f"{directory}/{info.base_name}"))
    return sorted(found)


def list_parts(
    filesystem: pafs.FileSystem,
    trajectories_dir: str,
    split: str | Iterable[str] | None = None,
    steps: int | Iterable[int] | None = None,
) -> list[PartFile]:
    """The parts to read under a model's `trajectories/` directory (a path within
    `filesystem`), sorted by (split, step, part). Files being written, names the store does not
    write and legacy parts already folded into their step file are skipped, so every group is
    listed once and a part appears whole or not at all."""
    splits = _as_set(split, str, "split")
    wanted = _as_set(steps, int, "steps")
    for name in splits or ():
        validate_name(name, "split")
    if splits is None:
        dirs = [
            info.base_name
            for info in list_dir(filesystem, trajectories_dir)
            if info.type == pafs.FileType.Directory and not info.base_name.startswith(".")
        ]
    else:
        dirs = sorted(splits)
    found: list[PartFile] = []
    for split_name in dirs:
        directory = f"{trajectories_dir}/{split_name}"
        for info in list_dir(filesystem, directory):
            parsed = parse_part_name(info.base_name)
            if parsed is None or info.type != pafs.FileType.File:
                continue
            if wanted is not None and parsed[0] not in wanted:
                continue
            found.append(
                PartFile(split_name, parsed[0], parsed[1], f"{directory}/{info.base_name}")
            )
    found.sort()
    return _without_folded(filesystem, found)


def _without_folded(filesystem: pafs.FileSystem, parts: list[PartFile]) -> list[PartFile]:
    """Drop the legacy parts a step file says it holds. Only steps that still have extra
    parts cost a footer read."""
    step_files = {(p.split, p.step): p for p in parts if p.part == 0}
    extras_at = {(p.split, p.step) for p in parts if p.part > 0}
    folded: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for key in extras_at & set(step_files):
        try:
            metadata = pq.read_schema(step_files[key].path, filesystem=filesystem).metadata
        except (OSError, ValueError):
            continue  # unreadable or gone: the reader of the step file reports it
        folded[key] = folded_parts(metadata)
    return [
        p
        for p in parts
        if p.part == 0
        or not any(_is_same(filesystem, p, entry) for entry in folded.get((p.split, p.step), ()))
    ]


def folded_parts(metadata: dict[bytes, bytes] | None) -> list[dict[str, Any]]:
    """The folded-parts entries of a step file's footer metadata (empty when none)."""
    raw = (metadata or {}).get(FOLDED_KEY)
    if raw is None:
        return []
    try:
        entries = json.loads(raw)
    except ValueError:
        return []
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []


def read_tail(handle: Any) -> tuple[int, bytes]:
    """(size, last 64 KiB) of an open file, which is left at its start. The footer of a part
    is in its last bytes, so two versions of a file that differ have different tails."""
    size = int(handle.size())
    handle.seek(max(0, size - _TAIL_BYTES))
    tail = bytes(handle.read())
    handle.seek(0)
    return size, tail


def part_identity(filesystem: pafs.FileSystem, path: str) -> dict[str, Any]:
    """What a folded-parts entry records about a part: its name, size and tail hash."""
    with filesystem.open_input_file(path) as file:
        size, tail = read_tail(file)
    name = path.rsplit("/", 1)[-1]
    return {"name": name, "size": size, "tail": hashlib.sha256(tail).hexdigest()}


def _is_same(filesystem: pafs.FileSystem, part: PartFile, entry: dict[str, Any]) -> bool:
    if entry.get("name") != part.path.rsplit("/", 1)[-1]:
        return False
    try:
        return part_identity(filesystem, part.path) == entry
    except FileNotFoundError:
        return True  # deleted after the fold: nothing left to read twice


def read_step(
    filesystem: pafs.FileSystem, directory: str, split: str, step: int
) -> list[TrajectoryGroup]:
    """Every group logged at one step: the step file's, then any legacy parts it does not
    hold, as one consistent snapshot even while a writer folds the parts.

    The step file is opened first and its footer decides which parts to skip; a folding writer
    only deletes parts after replacing the step file, so a part listed but gone means the open
    step file is older than the fold, and the read starts over."""
    for _ in range(_READ_ATTEMPTS):
        parts = step_parts(filesystem, directory, split, step)
        try:
            return _read_snapshot(filesystem, parts)
        except FileNotFoundError:
            continue
    raise CorruptDataError(
        f"the parts of step {step} in {directory} kept changing while being read "
        f"({_READ_ATTEMPTS} attempts); is a writer stuck mid-fold? Read again"
    )


def _read_snapshot(filesystem: pafs.FileSystem, parts: list[PartFile]) -> list[TrajectoryGroup]:
    if not parts:
        return []
    groups: list[TrajectoryGroup] = []
    folded: list[dict[str, Any]] = []
    extras = parts
    if parts[0].part == 0:
        extras = parts[1:]
        with open_part(parts[0].path, filesystem) as (file, where):
            folded = folded_parts(file.schema_arrow.metadata)
            groups.extend(read_open_part(where, file))
    for part in extras:
        if any(_is_same(filesystem, part, entry) for entry in folded):
            continue
        with open_part(part.path, filesystem) as (file, where):
            groups.extend(read_open_part(where, file))
    return groups


def _as_set(value: Any, kind: type, what: str) -> set[Any] | None:
    if value is None:
        return None
    if isinstance(value, kind) and not isinstance(value, bool):
        return {value}
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise InvalidInputError(
            f"{what} must be a {kind.__name__} or an iterable of them, got {value!r:.100}"
        )
    items = list(value)
    bad = [item for item in items if not isinstance(item, kind) or isinstance(item, bool)]
    if bad:
        raise InvalidInputError(f"{what} must hold only {kind.__name__} values, got {bad[:3]!r}")
    return set(items)
