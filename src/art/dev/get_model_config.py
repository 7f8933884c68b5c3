"""ART's `art.dev.get_model_config`, under arthex: the settings arthex's LocalBackend trains
and serves a base model with, in ART's `BackendModelConfig` shape, with a config's keys over
them as ART merges them.

ART fills this dict with its own engine's defaults (4-bit Unsloth loading, an 8-bit paged
optimizer, vLLM's sleep mode); arthex's are the LocalBackend's (`arthex.LocalBackend(...)`'s
defaults, and `arthex.TrainConfig`'s learning rate and gradient clip), under the same keys where
ART has one for them: `lora_config` rank, alpha and target modules, `trainer_args`' optimizer
settings, `engine_args`' vLLM memory share, and `init_args.model_name`, the latest checkpoint
under `output_dir` when there is one. ART's other keys pass through as given.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from arthex.art._table import module_attributes
from arthex.art.dev.engine import EngineArgs
from arthex.art.dev.model import (
    PEFT_ARGS_MIGRATION_MESSAGE,
    BackendModelConfig,
    InitArgs,
    InternalModelConfig,
    LoRAConfig,
    TrainerArgs,
)
from arthex.core.errors import InvalidInputError, require_extra

# ART's keys a config may carry that this dict takes as they are.
_PASSED = (
    "allow_unvalidated_arch",
    "trainer_gpu_ids",
    "inference_gpu_ids",
    "vllm_runtime",
    "megatron_model_initialization",
)


def default_target_modules(base_model: str) -> list[str]:
    """The modules arthex's LocalBackend puts LoRA on when none are given (the same for every
    base model: the attention and MLP projections its trainer finds by name)."""
    del base_model
    require_extra("local", "torch")
    from arthex.adapters.local.trainer import DEFAULT_LORA_TARGETS

    return list(DEFAULT_LORA_TARGETS)


def get_model_config(
    base_model: str,
    output_dir: str,
    config: InternalModelConfig | None,
    lora_config: LoRAConfig | None = None,
) -> BackendModelConfig:
    """The LocalBackend's settings for `base_model` in ART's shape (see the module's text)."""
    import inspect

    from arthex.adapters.local import LocalBackend
    from arthex.adapters.local.checkpoints import latest_step, step_dir
    from arthex.core.config import TrainConfig

    config = config if config is not None else InternalModelConfig()
    if "peft_args" in config:
        raise InvalidInputError(PEFT_ARGS_MIGRATION_MESSAGE)
    if "rollout_weights_mode" in config:
        raise InvalidInputError("rollout_weights_mode was removed from ART's config; leave it out")
    backend = {
        name: p.default for name, p in inspect.signature(LocalBackend.__init__).parameters.items()
    }
    train = TrainConfig()
    init_args = InitArgs(model_name=base_model)
    init_args.update(config.get("init_args", {}))
    latest = latest_step(Path(output_dir))
    if latest is not None:  # as ART: a run with checkpoints resumes from its latest
        init_args["model_name"] = str(step_dir(Path(output_dir), latest))
    engine_args = EngineArgs(
        model=base_model, gpu_memory_utilization=backend["gpu_memory_utilization"]
    )
    engine_args.update(config.get("engine_args", {}))
    merged_lora = LoRAConfig(
        rank=backend["lora_rank"],
        alpha=backend["lora_alpha"],
        target_modules=default_target_modules(base_model),
    )
    merged_lora.update(lora_config or {})
    beta1, beta2 = backend["adam_betas"]
    trainer_args = TrainerArgs(
        adam_beta1=beta1,
        adam_beta2=beta2,
        weight_decay=backend["weight_decay"],
        learning_rate=train.learning_rate,
        output_dir=output_dir,
        seed=backend["seed"],
    )
    if train.max_grad_norm is not None:
        trainer_args["max_grad_norm"] = train.max_grad_norm
    trainer_args.update(config.get("trainer_args", {}))
    result = BackendModelConfig(
        init_args=init_args,
        engine_args=engine_args,
        lora_config=merged_lora,
        rollout_weight_update_mode=config.get("rollout_weight_update_mode", "step_lora"),
        tinker_args=config.get("tinker_args"),
        trainer_args=trainer_args,
    )
    for key in _PASSED:
        if key in config:
            result[key] = config[key]  # type: ignore[literal-required]
    return result


if not TYPE_CHECKING:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
