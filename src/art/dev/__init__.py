"""ART's `art.dev`, under arthex.

ART configures the inference engine, LoRA and the trainer on the model, with these TypedDicts
(`TrainableModel(_internal_config=art.dev.InternalModelConfig(...))`). arthex configures them
on the backend (`LocalBackend(engine=..., lora_rank=..., ...)`), and its `TrainableModel`
takes `_internal_config` and `lora_config` only to warn that they are ignored and to name the
backend argument instead. So the shapes here are TypedDicts with ART's keys (an ART script that
builds one runs on, and a type checker sees ART's keys), `get_model_config` and
`get_openai_server_config` say what the LocalBackend trains and serves with in their shape, and
`validate_dedicated_config` and its predicates check a config with ART's rules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.art.dev.engine import EngineArgs as EngineArgs
    from arthex.art.dev.model import BackendModelConfig as BackendModelConfig
    from arthex.art.dev.model import InitArgs as InitArgs
    from arthex.art.dev.model import InternalModelConfig as InternalModelConfig
    from arthex.art.dev.model import LoRAConfig as LoRAConfig
    from arthex.art.dev.model import PeftArgs as PeftArgs
    from arthex.art.dev.model import RolloutWeightUpdateMode as RolloutWeightUpdateMode
    from arthex.art.dev.model import TinkerArgs as TinkerArgs
    from arthex.art.dev.model import TinkerNativeArgs as TinkerNativeArgs
    from arthex.art.dev.model import TinkerTrainingClientArgs as TinkerTrainingClientArgs
    from arthex.art.dev.model import TrainerArgs as TrainerArgs
    from arthex.art.dev.model import VllmRuntimeArgs as VllmRuntimeArgs
    from arthex.art.dev.openai_server import OpenAIServerConfig as OpenAIServerConfig
    from arthex.art.dev.openai_server import ServerArgs as ServerArgs
    from arthex.art.dev.openai_server import get_openai_server_config as get_openai_server_config
    from arthex.art.dev.train import TrainConfig as TrainConfig
    from arthex.art.dev.train import TrainSFTConfig as TrainSFTConfig
    from arthex.art.dev.validate import is_dedicated_mode as is_dedicated_mode
    from arthex.art.dev.validate import is_external_vllm_mode as is_external_vllm_mode
    from arthex.art.dev.validate import validate_dedicated_config as validate_dedicated_config

    __all__ = [
        "BackendModelConfig",
        "EngineArgs",
        "InitArgs",
        "InternalModelConfig",
        "LoRAConfig",
        "OpenAIServerConfig",
        "PeftArgs",
        "RolloutWeightUpdateMode",
        "ServerArgs",
        "TinkerArgs",
        "TinkerNativeArgs",
        "TinkerTrainingClientArgs",
        "TrainConfig",
        "TrainSFTConfig",
        "TrainerArgs",
        "VllmRuntimeArgs",
        "get_openai_server_config",
        "is_dedicated_mode",
        "is_external_vllm_mode",
        "validate_dedicated_config",
    ]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
