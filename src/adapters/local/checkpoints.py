"""Checkpoint directories: `{model_dir}/checkpoints/{step:04d}/`, published atomically.

A checkpoint holds the trained weights (`model.safetensors` for full fine-tuning, or the peft
adapter files), the optimizer state (`optimizer.safetensors` plus `optimizer.json` for what is
not a tensor) and `trainer_state.json`. It is written into `checkpoints/.tmp-*`, every file
fsynced, then renamed into place and the parent fsynced: a crash leaves either no checkpoint
or a complete one. `trainer_state.json` is the completeness marker, so a digit-named folder
without it (copied by hand, half-deleted) is never taken for a step.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from ...core.errors import BackendError, CorruptDataError
from .._files import TEMP_PREFIX, fsync_dir

STATE_FILE = "trainer_state.json"
METRICS_KEY = "train_metrics"  # in the state file: what `train` yielded for this step
WEIGHTS_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.safetensors"
OPTIMIZER_META_FILE = "optimizer.json"
FORMAT_VERSION = 1
_STEP_DIR = re.compile(r"\d+")


def checkpoints_dir(model_dir: Path) -> Path:
    return model_dir / "checkpoints"


def step_dir(model_dir: Path, step: int) -> Path:
    return checkpoints_dir(model_dir) / f"{step:04d}"


def complete_steps(model_dir: Path) -> list[int]:
    """Steps with a complete checkpoint, ascending. Temp and incomplete folders are ignored."""
    root = checkpoints_dir(model_dir)
    if not root.is_dir():
        return []
    steps = [
        int(entry.name)
        for entry in root.iterdir()
        if _STEP_DIR.fullmatch(entry.name) and (entry / STATE_FILE).is_file()
    ]
    return sorted(steps)


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


def publish(
    model_dir: Path, step: int, write: Callable[[Path], None], state: Mapping[str, Any]
) -> Path:
    """Write a checkpoint with `write(temp_dir)` plus its state file, then rename it to
    `{step:04d}`. Fails (BackendError) if that folder exists, leaving it untouched."""
    root = checkpoints_dir(model_dir)
    root.mkdir(parents=True, exist_ok=True)
    target = step_dir(model_dir, step)
    temp = root / f"{TEMP_PREFIX}{step:04d}.{os.getpid()}.{secrets.token_hex(4)}"
    temp.mkdir()
    try:
        write(temp)
        body = json.dumps({**state, "step": step, "format": FORMAT_VERSION}, indent=2)
        (temp / STATE_FILE).write_text(body + "\n")
        for path in _files(temp):
            _fsync_file(path)
        fsync_dir(temp)
        if target.exists():
            raise BackendError(
                f"checkpoint folder {target} already exists; the run's checkpoints disagree with "
                "its step. Move it away if it is not a checkpoint written by arthex"
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


def step_folders(model_dir: Path) -> list[int]:
    """Every digit-named folder, complete or not (what deletion may act on)."""
    root = checkpoints_dir(model_dir)
    if not root.is_dir():
        return []
    return sorted(int(e.name) for e in root.iterdir() if _STEP_DIR.fullmatch(e.name) and e.is_dir())


# --- weights -------------------------------------------------------------------------------


def save_weights(tensors: Mapping[str, torch.Tensor], path: Path) -> None:
    """A whole state_dict as safetensors. Tied parameters share storage, which safetensors
    refuses, so every name after the first of a storage gets its own copy (loading writes the
    same values into the shared parameter twice)."""
    seen: set[tuple[int, int]] = set()
    out: dict[str, torch.Tensor] = {}
    for name, tensor in tensors.items():
        value = tensor.detach().to("cpu").contiguous()
        key = (value.untyped_storage().data_ptr(), int(value.storage_offset()))
        out[name] = value.clone() if key in seen else value
        seen.add(key)
    save_file(out, str(path), metadata={"format": "pt"})


def load_weights(path: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(str(path))
    except Exception as exc:
        raise CorruptDataError(f"cannot read weights {path}: {exc}") from exc


# --- optimizer -----------------------------------------------------------------------------


def save_optimizer(
    optimizer: torch.optim.Optimizer, param_names: list[str], directory: Path
) -> None:
    """The optimizer state keyed by parameter name: tensors in safetensors, the rest (param
    group hyper-parameters, non-tensor state) in a JSON sidecar."""
    save_optimizer_state(optimizer.state_dict(), param_names, directory)


def save_optimizer_state(state: Mapping[str, Any], param_names: list[str], directory: Path) -> None:
    """`save_optimizer` for a state_dict already in hand (e.g. gathered from sharded ranks),
    whose parameters are numbered like `param_names`."""
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for index, values in state["state"].items():
        name = param_names[int(index)]
        for key, value in values.items():
            if isinstance(value, torch.Tensor):
                tensors[f"state.{name}.{key}"] = value.detach().to("cpu").contiguous()
            else:
                scalars.setdefault(name, {})[key] = value
    groups = []
    for group in state["param_groups"]:
        entry = {k: _jsonable(v) for k, v in group.items() if k != "params"}
        entry["params"] = [param_names[int(i)] for i in group["params"]]
        groups.append(entry)
    save_file(tensors, str(directory / OPTIMIZER_FILE), metadata={"format": "pt"})
    meta = {"format": FORMAT_VERSION, "param_groups": groups, "state_scalars": scalars}
    (directory / OPTIMIZER_META_FILE).write_text(json.dumps(meta, indent=2) + "\n")


def load_optimizer(
    optimizer: torch.optim.Optimizer, param_names: list[str], directory: Path
) -> None:
    """Restore what `save_optimizer` wrote into an optimizer built over the same names."""
    optimizer.load_state_dict(read_optimizer_state(param_names, directory))


def read_optimizer_state(param_names: list[str], directory: Path) -> dict[str, Any]:
    """What `save_optimizer` wrote, as a state_dict whose parameters are numbered like
    `param_names` (checked: the names must be the saved ones, in order)."""
    meta_path = directory / OPTIMIZER_META_FILE
    try:
        meta = json.loads(meta_path.read_text())
        tensors = load_file(str(directory / OPTIMIZER_FILE))
    except (OSError, ValueError) as exc:
        raise CorruptDataError(f"cannot read the optimizer state in {directory}: {exc}") from exc
    index = {name: i for i, name in enumerate(param_names)}
    saved_names = [name for group in meta["param_groups"] for name in group["params"]]
    if saved_names != param_names:
        raise CorruptDataError(
            f"the optimizer state in {directory} is for other parameters "
            f"({len(saved_names)} saved, {len(param_names)} now); was the checkpoint written "
            "with another LoRA/full fine-tuning setting?"
        )
    state: dict[int, dict[str, Any]] = {}
    for key, tensor in tensors.items():
        _, rest = key.split(".", 1)
        name, field = rest.rsplit(".", 1)
        state.setdefault(index[name], {})[field] = tensor
    for name, values in meta.get("state_scalars", {}).items():
        state.setdefault(index[name], {}).update(values)
    groups = []
    for group in meta["param_groups"]:
        entry = dict(group)
        if "betas" in entry and isinstance(entry["betas"], list):
            entry["betas"] = tuple(entry["betas"])
        entry["params"] = [index[name] for name in group["params"]]
        groups.append(entry)
    return {"state": state, "param_groups": groups}


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, torch.Tensor):
        return value.item()
    return value


def _files(directory: Path) -> Iterator[Path]:
    for path in sorted(directory.rglob("*")):
        if path.is_file():
            yield path


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
