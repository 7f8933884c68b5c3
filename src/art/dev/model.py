"""ART's `art.dev.model`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.art.dev import BackendModelConfig as BackendModelConfig
    from arthex.art.dev import InitArgs as InitArgs
    from arthex.art.dev import InternalModelConfig as InternalModelConfig
    from arthex.art.dev import LoRAConfig as LoRAConfig
    from arthex.art.dev import PeftArgs as PeftArgs
    from arthex.art.dev import TinkerArgs as TinkerArgs
    from arthex.art.dev import TinkerNativeArgs as TinkerNativeArgs
    from arthex.art.dev import TinkerTrainingClientArgs as TinkerTrainingClientArgs
    from arthex.art.dev import TrainerArgs as TrainerArgs
    from arthex.art.dev import VllmRuntimeArgs as VllmRuntimeArgs

    __all__ = [
        "BackendModelConfig",
        "InitArgs",
        "InternalModelConfig",
        "LoRAConfig",
        "PeftArgs",
        "TinkerArgs",
        "TinkerNativeArgs",
        "TinkerTrainingClientArgs",
        "TrainerArgs",
        "VllmRuntimeArgs",
    ]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
