"""Tensor I/O of a checkpoint: weights and optimizer state as safetensors (torch).

The folder logic (where checkpoints live, which are complete, atomic publishing and deletion)
is `checkpoints`, which imports no torch.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from ...core.errors import CorruptDataError
from .checkpoints import FORMAT_VERSION, OPTIMIZER_FILE, OPTIMIZER_META_FILE


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
