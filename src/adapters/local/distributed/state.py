"""Sharded model and optimizer state <-> arthex's checkpoint files, through rank 0.

Saving gathers full tensors onto rank 0's CPU with torch.distributed.checkpoint's state_dict
helpers (`full_state_dict=True, cpu_offload=True`; frozen base weights are left out, so a LoRA
checkpoint moves only the adapter), and rank 0 writes them with the single-process writers:
`model.safetensors` for full fine-tuning, peft's own `save_pretrained` for the adapter, and
the optimizer state keyed by parameter name. Loading is the mirror: rank 0 reads the files,
and `broadcast_from_rank0` hands every rank its shard. Ranks on other nodes never touch the
run's folder, so it needs to exist only beside the frontend.

Parameter names are the model's own (FSDP2 keeps them), so the optimizer's name order is the
single-process one and the files are interchangeable between any numbers of ranks.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

import attrs
import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from ....core.errors import CorruptDataError
from ...hub import resolve_base_model
from .. import checkpoint_io
from .. import checkpoints as ckpt

if TYPE_CHECKING:
    from ..trainer import TrainerSettings


class RankTrainer(Protocol):
    """What this module reads and sets on one rank's trainer (the ShardedTrainer)."""

    rank: int
    settings: TrainerSettings
    model: Any
    optimizer: torch.optim.AdamW | None
    param_names: list[str]
    full_finetune: bool


ADAPTER_WEIGHTS_FILE = "adapter_model.safetensors"
_GATHER = StateDictOptions(full_state_dict=True, cpu_offload=True, ignore_frozen_params=True)
_GATHER_OPTIMIZER = StateDictOptions(full_state_dict=True, cpu_offload=True)


@attrs.frozen
class CheckpointHeader:
    """What every rank needs before building its model: the checkpoint's trainer state and,
    for LoRA, its adapter config (rank 0 reads both and broadcasts them)."""

    state: dict[str, Any]
    lora_config: Any | None
    has_optimizer: bool
    foreign: bool = False  # a LoRA adapter arthex did not write (ART's): weights only


@attrs.frozen
class RankZeroCheckpoint:
    header: CheckpointHeader
    directory: Path


def read_on_rank0(checkpoint: Path | None) -> RankZeroCheckpoint | None:
    if checkpoint is None:
        return None
    foreign = ckpt.foreign_adapter(checkpoint)
    state = {} if foreign else ckpt.read_state(checkpoint)
    lora_config = None
    if state.get("mode") != "full":
        from peft import PeftConfig

        try:
            lora_config = PeftConfig.from_pretrained(str(checkpoint))
        except (OSError, ValueError) as exc:
            raise CorruptDataError(
                f"cannot read the adapter config in {checkpoint}: {exc}"
            ) from exc
        lora_config.inference_mode = False  # saved adapters say True; this one trains
    has_optimizer = not foreign and (checkpoint / ckpt.OPTIMIZER_META_FILE).is_file()
    header = CheckpointHeader(state, lora_config, has_optimizer, foreign)
    return RankZeroCheckpoint(header, checkpoint)


# --- loading -------------------------------------------------------------------------------


def scatter_weights(trainer: RankTrainer, found: RankZeroCheckpoint | None) -> None:
    """Rank 0's weights (the model file, or the adapter) into every rank's shards."""
    full: dict[str, torch.Tensor] = {}
    if trainer.rank == 0:
        assert found is not None
        full = _weights_file(trainer, found.directory)
    _broadcast_into(trainer, full, strict=trainer.full_finetune)


def scatter_optimizer(trainer: RankTrainer, found: RankZeroCheckpoint | None) -> None:
    """Rank 0's optimizer files into every rank's shard of the AdamW state.

    A checkpoint written before the first update holds no moments, only the hyper-parameters;
    those are set directly. (torch's loader would first run a zero-gradient step to create
    state to load into, and that step would count: AdamW's bias correction would then differ
    from a single process's.)"""
    assert trainer.optimizer is not None
    numbered: dict[str, Any] = {}
    if trainer.rank == 0:
        assert found is not None
        numbered = checkpoint_io.read_optimizer_state(trainer.param_names, found.directory)
    shared: list[Any] = [numbered.get("param_groups"), bool(numbered.get("state"))]
    dist.broadcast_object_list(shared, src=0)
    groups, has_moments = shared
    if not has_moments:
        trainer.optimizer.load_state_dict({"state": {}, "param_groups": groups})
        return
    named = _by_name(numbered, trainer.param_names) if trainer.rank == 0 else {}
    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
    set_optimizer_state_dict(trainer.model, trainer.optimizer, named, options=options)


def scatter_reference(trainer: RankTrainer, reference: Path | None) -> None:
    """The KL reference's trainable weights into every rank's shards (the base weights when
    `reference` is None; a LoRA run's base reference is its disabled adapter instead)."""
    full: dict[str, torch.Tensor] = {}
    if trainer.rank == 0:
        if reference is not None:
            full = _weights_file(trainer, reference)
        else:
            full = _base_weights(trainer)
    _broadcast_into(trainer, full, strict=False)


def _broadcast_into(trainer: RankTrainer, full: dict[str, torch.Tensor], *, strict: bool) -> None:
    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True, strict=strict)
    values: dict[str, Any] = full if trainer.rank == 0 else {}
    set_model_state_dict(trainer.model, values, options=options)


def _weights_file(trainer: RankTrainer, directory: Path) -> dict[str, torch.Tensor]:
    if trainer.full_finetune:
        return checkpoint_io.load_weights(directory / ckpt.WEIGHTS_FILE)
    adapter = directory / ADAPTER_WEIGHTS_FILE
    if not adapter.is_file():
        raise CorruptDataError(f"the checkpoint {directory} has no {adapter.name}")
    saved = checkpoint_io.load_weights(adapter)
    names = adapter_names(trainer)
    unknown = sorted(set(saved) - set(names))
    if unknown:
        raise CorruptDataError(
            f"{adapter} holds tensors this adapter does not have ({unknown[:3]}...); was it "
            "written for another base model or LoRA target list?"
        )
    return {names[key]: value for key, value in saved.items()}


def adapter_names(trainer: RankTrainer) -> dict[str, str]:
    """Adapter-file key -> model parameter name, by peft's own renaming (it drops the adapter
    name), asked of peft with a probe dict whose values number the parameters."""
    from peft import get_peft_model_state_dict

    names = list(trainer.param_names)
    probe = {name: torch.tensor(float(i)) for i, name in enumerate(names)}
    renamed = get_peft_model_state_dict(trainer.model, state_dict=probe)
    return {key: names[int(value.item())] for key, value in renamed.items()}


def _base_weights(trainer: RankTrainer) -> dict[str, torch.Tensor]:
    from transformers import AutoModelForCausalLM

    base: Any = AutoModelForCausalLM.from_pretrained(
        resolve_base_model(trainer.settings.base_model), dtype=torch.float32
    )
    weights: dict[str, torch.Tensor] = base.state_dict()
    return weights


# --- saving --------------------------------------------------------------------------------


def write_gathered(trainer: RankTrainer, directory: Path) -> None:
    """Gather on every rank (collectives), write on rank 0 only."""
    weights, optimizer = _gather(trainer)
    if trainer.rank != 0:
        return
    if trainer.full_finetune:
        checkpoint_io.save_weights(weights, directory / ckpt.WEIGHTS_FILE)
    else:
        trainer.model.save_pretrained(str(directory), state_dict=weights)
        readme = directory / "README.md"
        if readme.exists():
            readme.unlink()
    checkpoint_io.save_optimizer_state(optimizer, trainer.param_names, directory)


def gathered_tensors(trainer: RankTrainer) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Full trainable weights by parameter name and the full optimizer state (numbered like
    `param_names`); complete on rank 0, empty elsewhere."""
    weights, optimizer = _gather(trainer)
    if trainer.rank != 0:
        return {}, {}
    return {name: weights[name] for name in trainer.param_names}, optimizer


def _gather(trainer: RankTrainer) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Full weights and the numbered optimizer state on rank 0. An optimizer that has not
    stepped yet is written as it is (hyper-parameters, no moments): torch's gatherer would
    first run a zero-gradient step on it, which counts as a step."""
    assert trainer.optimizer is not None
    weights = cast(dict[str, torch.Tensor], get_model_state_dict(trainer.model, options=_GATHER))
    if not trainer.optimizer.state:
        return weights, trainer.optimizer.state_dict()
    named = get_optimizer_state_dict(trainer.model, trainer.optimizer, options=_GATHER_OPTIMIZER)
    return weights, _numbered(named, trainer.param_names) if trainer.rank == 0 else {}


def _numbered(named: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """An optimizer state_dict keyed by parameter name -> one numbered like `names`."""
    index = {name: i for i, name in enumerate(names)}
    groups = [
        {**group, "params": [index[n] for n in group["params"]]} for group in named["param_groups"]
    ]
    return {"state": {index[n]: v for n, v in named["state"].items()}, "param_groups": groups}


def _by_name(numbered: dict[str, Any], names: list[str]) -> dict[str, Any]:
    groups = [
        {**group, "params": [names[int(i)] for i in group["params"]]}
        for group in numbered["param_groups"]
    ]
    return {
        "state": {names[int(i)]: v for i, v in numbered["state"].items()},
        "param_groups": groups,
    }
