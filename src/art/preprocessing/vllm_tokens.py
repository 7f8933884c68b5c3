"""ART's `art.preprocessing.vllm_tokens`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.utils.vllm_tokens import COMPLETION_TOKENS_KEY as COMPLETION_TOKENS_KEY
    from arthex.utils.vllm_tokens import (
        attach_completion_token_metadata as attach_completion_token_metadata,
    )
    from arthex.utils.vllm_tokens import (
        attach_vllm_token_metadata_to_choice as attach_vllm_token_metadata_to_choice,
    )
    from arthex.utils.vllm_tokens import choice_completion_tokens as choice_completion_tokens
    from arthex.utils.vllm_tokens import (
        choice_vllm_token_metadata as choice_vllm_token_metadata,
    )

    __all__ = [
        "COMPLETION_TOKENS_KEY",
        "attach_completion_token_metadata",
        "attach_vllm_token_metadata_to_choice",
        "choice_completion_tokens",
        "choice_vllm_token_metadata",
    ]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
