"""ART's `art.dev.validate`, under arthex: ART's checks of an `InternalModelConfig`, with ART's
rules, so a config kept for both libraries is checked the same way. They read the dict only:
arthex's LocalBackend ignores these keys (it takes `device=`, `devices=` and
`engine_args=` itself) and says so when the model is given them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from arthex.art._table import module_attributes
from arthex.art.dev.model import InternalModelConfig
from arthex.core.errors import InvalidInputError

_REMOVED = "rollout_weights_mode was removed from ART's config; leave it out"
_FAST = "init_args.fast_inference is no longer taken; leave it out"


def _runtime(config: InternalModelConfig) -> Mapping[str, Any]:
    runtime = config.get("vllm_runtime", {})
    if not isinstance(runtime, Mapping):
        raise InvalidInputError(f"vllm_runtime must be a mapping, got {runtime!r}")
    mode = runtime.get("mode", "managed")
    if mode not in ("managed", "external"):
        raise InvalidInputError(f"vllm_runtime.mode must be 'managed' or 'external', got {mode!r}")
    return runtime


def is_external_vllm_mode(config: InternalModelConfig) -> bool:
    """True when the config attaches to a vLLM server started elsewhere."""
    return bool(_runtime(config).get("mode", "managed") == "external")


def is_dedicated_mode(config: InternalModelConfig) -> bool:
    """True when training and inference get their own GPUs (or inference runs elsewhere)."""
    return is_external_vllm_mode(config) or (
        "trainer_gpu_ids" in config and "inference_gpu_ids" in config
    )


def validate_dedicated_config(config: InternalModelConfig) -> None:
    """Raise InvalidInputError (a ValueError) when the GPU split the config asks for cannot
    hold; a config that asks for none passes."""
    if "rollout_weights_mode" in config:
        raise InvalidInputError(_REMOVED)
    update = config.get("rollout_weight_update_mode", "step_lora")
    if update not in ("step_lora", "in_flight_lora"):
        raise InvalidInputError(
            f"rollout_weight_update_mode must be 'step_lora' or 'in_flight_lora', got {update!r}"
        )
    trainer, inference = config.get("trainer_gpu_ids"), config.get("inference_gpu_ids")
    fast = "fast_inference" in config.get("init_args", {})
    if is_external_vllm_mode(config):
        if not _runtime(config).get("server_url"):
            raise InvalidInputError("vllm_runtime.server_url is needed when mode is 'external'")
        if trainer is not None and not trainer:
            raise InvalidInputError("trainer_gpu_ids must name at least one GPU")
        if fast:
            raise InvalidInputError(_FAST)
        return
    if (trainer is None) != (inference is None):
        raise InvalidInputError("set both trainer_gpu_ids and inference_gpu_ids, or neither")
    if fast:
        raise InvalidInputError(_FAST)
    if trainer is None or inference is None:
        return
    if not trainer:
        raise InvalidInputError("trainer_gpu_ids must name at least one GPU")
    if not inference:
        raise InvalidInputError("inference_gpu_ids must name at least one GPU")
    if shared := sorted(set(trainer) & set(inference)):
        raise InvalidInputError(f"trainer_gpu_ids and inference_gpu_ids share GPUs {shared}")
    engine = config.get("engine_args", {})
    parallel = int(engine.get("tensor_parallel_size", 1))
    if len(inference) > 1 and parallel != len(inference):
        raise InvalidInputError(
            f"{len(inference)} inference GPUs need engine_args.tensor_parallel_size="
            f"{len(inference)}, got {parallel}"
        )
    if engine.get("enable_sleep_mode"):
        raise InvalidInputError(
            "engine_args.enable_sleep_mode does not go with dedicated GPUs (nothing shares them)"
        )


if not TYPE_CHECKING:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
