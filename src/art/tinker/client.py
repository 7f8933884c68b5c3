"""ART's `art.tinker.client`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.adapters.tinker.openai_client import (
        MessagesAndChoicesWithLogprobs as MessagesAndChoicesWithLogprobs,
    )
    from arthex.adapters.tinker.openai_client import ParsedMessageOrChoice as ParsedMessageOrChoice
    from arthex.adapters.tinker.openai_client import (
        ParsedMessagesAndChoices as ParsedMessagesAndChoices,
    )
    from arthex.adapters.tinker.openai_client import (
        TinkerAsyncMessagesAndChoices as TinkerAsyncMessagesAndChoices,
    )
    from arthex.adapters.tinker.openai_client import (
        TinkerAsyncMessagesAndChoicesWithRawResponse as TinkerAsyncMessagesAndChoicesWithRawResponse,  # noqa: E501
    )
    from arthex.adapters.tinker.openai_client import (
        TinkerAsyncMessagesAndChoicesWithStreamingResponse as TinkerAsyncMessagesAndChoicesWithStreamingResponse,  # noqa: E501
    )
    from arthex.adapters.tinker.openai_client import TinkerAsyncModels as TinkerAsyncModels
    from arthex.adapters.tinker.openai_client import (
        TinkerAsyncModelsWithRawResponse as TinkerAsyncModelsWithRawResponse,
    )
    from arthex.adapters.tinker.openai_client import (
        TinkerAsyncModelsWithStreamingResponse as TinkerAsyncModelsWithStreamingResponse,
    )
    from arthex.adapters.tinker.openai_client import TinkerAsyncOpenAI as TinkerAsyncOpenAI

    __all__ = [
        "MessagesAndChoicesWithLogprobs",
        "ParsedMessageOrChoice",
        "ParsedMessagesAndChoices",
        "TinkerAsyncMessagesAndChoices",
        "TinkerAsyncMessagesAndChoicesWithRawResponse",
        "TinkerAsyncMessagesAndChoicesWithStreamingResponse",
        "TinkerAsyncModels",
        "TinkerAsyncModelsWithRawResponse",
        "TinkerAsyncModelsWithStreamingResponse",
        "TinkerAsyncOpenAI",
    ]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
