"""Checkpoint directories: `{model_dir}/checkpoints/{step:04d}/`, published atomically.

This module is the folder logic only and imports no torch, so `arthex prune` and `arthex runs`
use the very code the backend uses; reading and writing tensors is `checkpoint_io`.

A checkpoint holds the trained weights (`model.safetensors` for full fine-tuning, or the peft
adapter files), the optimizer state (`optimizer.safetensors` plus `optimizer.json` for what is
not a tensor) and `trainer_state.json`. It is written into `checkpoints/.tmp-*`, every file
fsynced, then renamed into place and the parent fsynced: a crash leaves either no checkpoint
or a complete one. `trainer_state.json` is the completeness marker, so a digit-named folder
without it (copied by hand, half-deleted) is never taken for a step.

ART's LocalBackend writes the same folders holding only a PEFT LoRA adapter
(`adapter_model.safetensors` + `adapter_config.json`, no optimizer state, no state file):
those count as steps too (`foreign_adapter`), so arthex continues an ART run from its newest
adapter with ART's step numbering, and only retention ever deletes them.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ...core.errors import BackendError, CorruptDataError, InvalidInputError
from ...core.identity import RunRef
from ..files import (
    TEMP_PREFIX,
    disk_full,
    disk_use,
    free_bytes,
    fsync_dir,
    fsync_file,
    full_disk_said,
)
from ..layout import CHECKPOINTS, step_name

STATE_FILE = "trainer_state.json"
METRICS_KEY = "train_metrics"  # in the state file: what `train` yielded for this step
WEIGHTS_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.safetensors"
OPTIMIZER_META_FILE = "optimizer.json"
ADAPTER_FILES = ("adapter_model.safetensors", "adapter_config.json")
FORMAT_VERSION = 1
_STEP_DIR = re.compile(r"\d+")


def checkpoints_dir(model_dir: Path) -> Path:
    return model_dir / CHECKPOINTS


def step_dir(model_dir: Path, step: int) -> Path:
    return checkpoints_dir(model_dir) / step_name(step)


def complete_steps(model_dir: Path) -> list[int]:
    """Steps with a complete checkpoint, ascending. Temp and incomplete folders are ignored."""
    root = checkpoints_dir(model_dir)
    if not root.is_dir():
        return []
    steps = [
        int(entry.name)
        for entry in root.iterdir()
        if _STEP_DIR.fullmatch(entry.name)
        and ((entry / STATE_FILE).is_file() or _has_adapter(entry))
    ]
    return sorted(steps)


def _has_adapter(directory: Path) -> bool:
    return all((directory / name).is_file() for name in ADAPTER_FILES)


def whole_checkpoint(file_names: Collection[str]) -> bool:
    """A step folder holding these files is a whole checkpoint (the rule of `complete_steps`,
    for a folder known by its file names: one on an object store)."""
    return STATE_FILE in file_names or all(name in file_names for name in ADAPTER_FILES)


def foreign_adapter(directory: Path) -> bool:
    """A LoRA adapter folder arthex did not write (ART's LocalBackend writes these): the PEFT
    adapter files without arthex's state file. A `trainer_state.json` that is not arthex's
    (Hugging Face's Trainer writes one of that name) does not make it arthex's."""
    if not _has_adapter(directory):
        return False
    path = directory / STATE_FILE
    if not path.is_file():
        return True
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError):
        return False  # arthex's own state, damaged: read_state says so
    return not (isinstance(state, dict) and "format" in state)


def latest_step(model_dir: Path) -> int | None:
    steps = complete_steps(model_dir)
    return steps[-1] if steps else None


def read_state(directory: Path) -> dict[str, Any]:
    path = directory / STATE_FILE
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise CorruptDataError(f"cannot read {path}: {exc}") from exc
    if not isinstance(state, dict) or state.get("format") != FORMAT_VERSION:
        raise CorruptDataError(
            f"{path} is not a checkpoint state of format {FORMAT_VERSION}: {state!r}"
        )
    return state


def remove_stale_temps(model_dir: Path) -> list[str]:
    """Remove temp folders a crashed writer left behind. Call only when this process owns the
    run (at register), never while a write may be in flight."""
    root = checkpoints_dir(model_dir)
    removed: list[str] = []
    if root.is_dir():
        for entry in root.iterdir():
            if entry.name.startswith(TEMP_PREFIX):
                shutil.rmtree(entry, ignore_errors=True)
                removed.append(entry.name)
    return removed


# Room asked beyond a checkpoint's known size: its state file and the folder's own blocks.
ROOM_SLACK = 1 << 20


def known_size(model_dir: Path) -> int | None:
    """Bytes the next checkpoint takes: the newest complete one's (the same tensors, saved the
    same way), or None before the first."""
    latest = latest_step(model_dir)
    return None if latest is None else disk_use(step_dir(model_dir, latest))


def check_room(model_dir: Path, step: int) -> None:
    """Refuse to write checkpoint `step` (DiskFullError naming it, before any work is done)
    when its disk has less free space than the newest checkpoint's size."""
    size = known_size(model_dir)
    if size is not None and free_bytes(checkpoints_dir(model_dir)) < size + ROOM_SLACK:
        raise disk_full(step_dir(model_dir, step), size + ROOM_SLACK)


def publish(
    model_dir: Path, step: int, write: Callable[[Path], None], state: Mapping[str, Any]
) -> Path:
    """Write a checkpoint with `write(temp_dir)` plus its state file, then rename it to
    `{step:04d}`. Fails (BackendError) if that folder exists, leaving it untouched; on a full
    disk, DiskFullError naming the folder and the checkpoint's size, the temp folder gone."""
    root = checkpoints_dir(model_dir)
    target = step_dir(model_dir, step)
    size = known_size(model_dir)

    def needed() -> int:  # the known size, else what the write had reached
        return size if size is not None else disk_use(temp) + 1

    temp = root / f"{TEMP_PREFIX}{step:04d}.{os.getpid()}.{secrets.token_hex(4)}"
    try:
        with full_disk_said(target, needed):
            root.mkdir(parents=True, exist_ok=True)
            temp.mkdir()
            write(temp)
            body = json.dumps({**state, "step": step, "format": FORMAT_VERSION}, indent=2)
            (temp / STATE_FILE).write_text(body + "\n")
            for path in _files(temp):
                fsync_file(path)
            fsync_dir(temp)
            if target.exists():
                raise BackendError(
                    f"checkpoint folder {target} already exists; the run's checkpoints disagree "
                    "with its step. Move it away if it is not a checkpoint written by arthex"
                )
            os.rename(temp, target)
            fsync_dir(root)
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    return target


def copy_step(
    model_dir: Path, source: int, step: int, metrics: Sequence[Mapping[str, float]] = ()
) -> Path:
    """Publish checkpoint `step` as a copy of `source` (the nothing-trainable step)."""
    origin = step_dir(model_dir, source)
    state = read_state(origin)

    def write(temp: Path) -> None:
        for path in origin.iterdir():
            if path.is_file() and path.name != STATE_FILE:
                shutil.copy2(path, temp / path.name)

    return publish(
        model_dir,
        step,
        write,
        {**state, "copied_from": source, METRICS_KEY: [dict(m) for m in metrics]},
    )


def delete_steps(model_dir: Path, steps: Iterable[int]) -> list[int]:
    """Remove the given step folders. Each is first renamed to a temp name, so a crash mid-way
    never leaves a half-deleted folder that still looks like a checkpoint."""
    root = checkpoints_dir(model_dir)
    deleted: list[int] = []
    for step in sorted(set(steps)):
        folder = step_dir(model_dir, step)
        if not folder.exists():
            continue
        doomed = root / f"{TEMP_PREFIX}deleted-{step:04d}.{secrets.token_hex(4)}"
        os.rename(folder, doomed)
        fsync_dir(root)
        shutil.rmtree(doomed, ignore_errors=True)
        deleted.append(step)
    return deleted


def unkept(model_dir: Path, keep: Collection[int]) -> list[int]:
    """The step folders that deleting all but `keep` removes: every digit-named folder,
    complete or not, but the kept steps and the latest complete step (what serves and what
    training resumes from). The LocalBackend and `arthex prune` both delete these."""
    latest = latest_step(model_dir)
    protected = set(keep) if latest is None else {*keep, latest}
    return [step for step in step_folders(model_dir) if step not in protected]


def step_folders(model_dir: Path) -> list[int]:
    """Every digit-named folder, complete or not (what deletion may act on)."""
    root = checkpoints_dir(model_dir)
    if not root.is_dir():
        return []
    return sorted(int(e.name) for e in root.iterdir() if _STEP_DIR.fullmatch(e.name) and e.is_dir())


def _files(directory: Path) -> Iterator[Path]:
    for path in sorted(directory.rglob("*")):
        if path.is_file():
            yield path


class RunCheckpoints:
    """One run directory's checkpoints, read and deleted with the LocalBackend's own folder
    logic but without a trainer: the port's `CheckpointFiles` for `arthex prune`, which opens
    a run and applies the retention use case to it as a script does. Nothing serves from it,
    so deleting has nothing to unserve first; `run` names the run it was opened for."""

    def __init__(self, model_dir: Path, run: RunRef) -> None:
        self.model_dir = model_dir
        self.run = run

    def _check(self, run: RunRef) -> None:
        if run != self.run:
            raise InvalidInputError(f"these are the checkpoints of {self.run}, not of {run}")

    async def get_step(self, run: RunRef) -> int:
        self._check(run)
        return latest_step(self.model_dir) or 0

    async def checkpoint_steps(self, run: RunRef) -> list[int]:
        self._check(run)
        return complete_steps(self.model_dir)

    async def delete_checkpoint_files(
        self, run: RunRef, steps_to_keep: Collection[int]
    ) -> list[int]:
        """Delete every step folder but the kept ones and the latest (`unkept`: incomplete
        folders too, as the LocalBackend deletes); return the steps deleted."""
        self._check(run)
        return delete_steps(self.model_dir, unkept(self.model_dir, steps_to_keep))
