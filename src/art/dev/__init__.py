"""ART's `art.dev`, under arthex.

ART configures the inference engine, LoRA and the trainer on the model, with these TypedDicts
(`TrainableModel(_internal_config=art.dev.InternalModelConfig(...))`). arthex configures them
on the backend (`LocalBackend(engine=..., lora_rank=..., ...)`), and its `TrainableModel`
takes `_internal_config` and `lora_config` only to warn that they are ignored and to name the
backend argument instead. So here each shape is a plain `dict[str, Any]`: an ART script that
builds one runs on, and the warning says where the setting goes. ART's other names in
`art.dev` raise a one-line error saying what to use instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

from arthex.art._table import module_attributes

InternalModelConfig: TypeAlias = dict[str, Any]
BackendModelConfig: TypeAlias = dict[str, Any]
InitArgs: TypeAlias = dict[str, Any]
EngineArgs: TypeAlias = dict[str, Any]
TrainerArgs: TypeAlias = dict[str, Any]
PeftArgs: TypeAlias = dict[str, Any]
LoRAConfig: TypeAlias = dict[str, Any]
TinkerArgs: TypeAlias = dict[str, Any]
TinkerNativeArgs: TypeAlias = dict[str, Any]
TinkerTrainingClientArgs: TypeAlias = dict[str, Any]
VllmRuntimeArgs: TypeAlias = dict[str, Any]

if not TYPE_CHECKING:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
