"""ART's `art.utils.model_config`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.utils.model_config import MODEL_CONFIGS as MODEL_CONFIGS
    from arthex.utils.model_config import ModelConfig as ModelConfig
    from arthex.utils.model_config import detect_chat_template_parts as detect_chat_template_parts
    from arthex.utils.model_config import (
        get_instruction_response_parts as get_instruction_response_parts,
    )

    __all__ = [
        "MODEL_CONFIGS",
        "ModelConfig",
        "detect_chat_template_parts",
        "get_instruction_response_parts",
    ]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
