"""What the vLLM engine is started with, worked out without importing vLLM.

`VllmSettings` holds the knobs a user sets through `LocalBackend(vllm=...)`; `engine_arguments`
turns them, the backend's device and the LoRA rank in use into the keyword arguments of
`vllm.AsyncEngineArgs`. Everything here is plain Python, so a bad setting is refused in one
line before a model is loaded or a process is started, and the mapping is tested without vLLM.

The versions these arguments are checked against are `TESTED_VLLM` (each with the torch it
pins); `tests/vllm_api` validates them against an installed vLLM.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from types import MappingProxyType
from typing import Any, Literal

import attrs

from ...core.errors import InvalidInputError

__all__ = [
    "LORA_RANKS",
    "MANAGED",
    "TESTED_VLLM",
    "SleepLevel",
    "VllmSettings",
    "engine_arguments",
    "lora_rank_slot",
]

# vLLM release -> the torch it pins (its wheel's `torch==` requirement).
TESTED_VLLM: Mapping[str, str] = MappingProxyType({"0.26.0": "2.11.0", "0.33.0": "2.14.0"})

# The ranks vLLM's LoRAConfig accepts for max_lora_rank (its `MaxLoRARanks`, 0.26 to 0.33).
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)

SleepLevel = Literal[0, 1, 2]

# Arguments arthex sets itself: given in `engine_args` they are refused, naming the setting.
MANAGED: Mapping[str, str] = MappingProxyType(
    {
        "model": "the run's base_model",
        "enable_lora": "arthex (always on: each step is a LoRA adapter)",
        "max_lora_rank": "LocalBackend(lora_rank=...)",
        "max_loras": "VllmSettings(max_loras=...)",
        "gpu_memory_utilization": "VllmSettings(gpu_memory_utilization=...)",
        "max_model_len": "VllmSettings(max_model_len=...)",
        "enforce_eager": "VllmSettings(enforce_eager=...)",
        "max_num_seqs": "VllmSettings(max_num_seqs=...)",
        "enable_sleep_mode": "VllmSettings(sleep_level=...)",
        "device": "LocalBackend(device=...)",
        "device_ids": "LocalBackend(device=...)",
        "logprobs_mode": "arthex (raw logprobs: the trainer's convention)",
    }
)

_CUDA = re.compile(r"cuda(?::(\d+))?")


def _fraction(_instance: object, _attribute: object, value: float) -> None:
    if isinstance(value, bool) or not 0.0 < value <= 1.0:
        raise InvalidInputError(f"gpu_memory_utilization must be in (0, 1], got {value!r}")


def _optional_positive(name: str) -> Any:
    def check(_instance: object, _attribute: object, value: object) -> None:
        if value is None:
            return
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidInputError(f"{name} must be a positive integer or None, got {value!r}")

    return check


def _positive(_instance: object, _attribute: object, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInputError(f"max_loras must be a positive integer, got {value!r}")


def _bool(_instance: object, attribute: Any, value: object) -> None:
    # Not bool(): the string "false" would turn CUDA graphs off.
    if not isinstance(value, bool):
        raise InvalidInputError(f"{attribute.name} must be True or False, got {value!r}")


def _sleep_level(_instance: object, _attribute: object, value: object) -> None:
    if isinstance(value, bool) or value not in (0, 1, 2):
        raise InvalidInputError(f"sleep_level must be 0, 1 or 2, got {value!r}")


def _extra(_instance: object, _attribute: object, value: Mapping[str, Any]) -> None:
    for name in value:
        if not isinstance(name, str) or not name.isidentifier():
            raise InvalidInputError(f"engine_args keys must be argument names, got {name!r}")
        if name in MANAGED:
            raise InvalidInputError(
                f"engine_args[{name!r}] is set by {MANAGED[name]}, not through engine_args"
            )


def _frozen_mapping(value: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(value or {}))


@attrs.frozen
class VllmSettings:
    """How the vLLM engine of a `LocalBackend(engine="vllm")` runs.

    - `gpu_memory_utilization`: the share of the GPU's memory vLLM takes for weights and KV
      cache (vLLM keeps it for its whole life); the trainer uses what is left. 0.5 leaves
      half the GPU to training.
    - `max_model_len`: the longest prompt + completion served (None: the model's own, which
      vLLM may lower to fit its memory share).
    - `enforce_eager`: skip CUDA graph capture (starts faster, decodes slower).
    - `max_num_seqs`: the most sequences vLLM decodes at once (None: vLLM's default).
    - `max_loras`: how many LoRA steps one batch may mix.
    - `sleep_level`: 0 keeps vLLM's memory while training; 1 or 2 puts vLLM to sleep for each
      training step (1: weights moved to CPU memory and the KV cache dropped; 2: both
      dropped, the base weights reloaded from disk on waking), so training can use the whole
      GPU. Requests that arrive meanwhile wait until the step is saved.
    - `engine_args`: further `vllm.AsyncEngineArgs` fields, passed unchanged; a name the
      installed vLLM does not know is refused before anything starts.
    """

    gpu_memory_utilization: float = attrs.field(default=0.5, converter=float, validator=_fraction)
    max_model_len: int | None = attrs.field(
        default=None, validator=_optional_positive("max_model_len")
    )
    enforce_eager: bool = attrs.field(default=False, validator=_bool)
    max_num_seqs: int | None = attrs.field(
        default=None, validator=_optional_positive("max_num_seqs")
    )
    max_loras: int = attrs.field(default=4, validator=_positive)
    sleep_level: SleepLevel = attrs.field(default=0, validator=_sleep_level)
    engine_args: Mapping[str, Any] = attrs.field(
        factory=dict, converter=_frozen_mapping, validator=_extra
    )


def lora_rank_slot(lora_rank: int) -> int:
    """The smallest `max_lora_rank` vLLM accepts that holds adapters of `lora_rank`."""
    if isinstance(lora_rank, bool) or not isinstance(lora_rank, int) or lora_rank < 1:
        raise InvalidInputError(f"lora_rank must be a positive integer, got {lora_rank!r}")
    for slot in LORA_RANKS:
        if slot >= lora_rank:
            return slot
    raise InvalidInputError(
        f"lora_rank={lora_rank} is above the largest LoRA rank vLLM serves ({LORA_RANKS[-1]}); "
        'use a smaller lora_rank or engine="torch"'
    )


def device_ids(device: str | None) -> list[int] | None:
    """vLLM's `device_ids` for the backend's `device` (indices among the visible GPUs, as
    `cuda:N` means in torch); None lets vLLM take the first visible GPU. A device vLLM cannot
    serve on is refused in one line."""
    if device is None:
        return None
    found = _CUDA.fullmatch(device.strip()) if isinstance(device, str) else None
    if found is None:
        raise InvalidInputError(
            f"device={device!r}: vLLM serving needs a CUDA GPU (device='cuda' or 'cuda:N'); "
            'use engine="torch" to serve on the CPU'
        )
    return None if found.group(1) is None else [int(found.group(1))]


def engine_arguments(
    base_model: str,
    settings: VllmSettings,
    *,
    device: str | None,
    lora_rank: int,
    known: Collection[str] | None = None,
) -> dict[str, Any]:
    """The keyword arguments of `vllm.AsyncEngineArgs`. `known` is the installed vLLM's field
    names: optional fields it lacks are left out, and an `engine_args` name it lacks is
    refused by name. Nothing outside the fields vLLM 0.26 to 0.33 share is ever passed (no
    `device`, which vLLM removed in 0.10)."""
    arguments: dict[str, Any] = {
        "model": str(base_model),
        "enable_lora": True,
        "max_lora_rank": lora_rank_slot(lora_rank),
        "max_loras": settings.max_loras,
        "gpu_memory_utilization": settings.gpu_memory_utilization,
        "enforce_eager": settings.enforce_eager,
        "logprobs_mode": "raw_logprobs",
        "disable_log_stats": True,
    }
    ids = device_ids(device)
    if ids is not None:
        arguments["device_ids"] = ids
    if settings.max_model_len is not None:
        arguments["max_model_len"] = settings.max_model_len
    if settings.max_num_seqs is not None:
        arguments["max_num_seqs"] = settings.max_num_seqs
    if settings.sleep_level:
        arguments["enable_sleep_mode"] = True
    if known is not None:
        unknown = sorted(name for name in settings.engine_args if name not in known)
        if unknown:
            raise InvalidInputError(
                f"engine_args {unknown}: the installed vLLM's AsyncEngineArgs has no such "
                "field (check the name and the vLLM version)"
            )
        missing = sorted(name for name in arguments if name not in known)
        if missing:
            raise InvalidInputError(
                f"the installed vLLM's AsyncEngineArgs lacks {missing}, which arthex sets; "
                f"install a tested vLLM ({', '.join(TESTED_VLLM)})"
            )
    arguments.update(settings.engine_args)
    return arguments
