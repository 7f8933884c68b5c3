"""ART's `art.preprocessing.tokenize`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.adapters.local.sft_batch import SFTBatch as SFTBatch
    from arthex.adapters.local.sft_batch import tokenize_sft_batch as tokenize_sft_batch
    from arthex.adapters.local.tokenized import ChatTemplateTool as ChatTemplateTool
    from arthex.adapters.local.tokenized import (
        ChatTemplateToolSchemaFormat as ChatTemplateToolSchemaFormat,
    )
    from arthex.adapters.local.tokenized import TokenizedResult as TokenizedResult
    from arthex.adapters.local.tokenized import (
        assemble_vllm_training_sequences as assemble_vllm_training_sequences,
    )
    from arthex.adapters.local.tokenized import tokenize_trajectory as tokenize_trajectory
    from arthex.adapters.local.tokenized import (
        tokenize_trajectory_groups as tokenize_trajectory_groups,
    )

    __all__ = [
        "ChatTemplateTool",
        "ChatTemplateToolSchemaFormat",
        "SFTBatch",
        "TokenizedResult",
        "assemble_vllm_training_sequences",
        "tokenize_sft_batch",
        "tokenize_trajectory",
        "tokenize_trajectory_groups",
    ]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
