"""ART's `art.openai`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.utils.chat_streams import (
        IncompleteChatCompletionStreamError as IncompleteChatCompletionStreamError,
    )
    from arthex.utils.chat_streams import (
        consume_chat_completion_stream as consume_chat_completion_stream,
    )
    from arthex.utils.chat_streams import (
        consume_sync_chat_completion_stream as consume_sync_chat_completion_stream,
    )
    from arthex.utils.chat_streams import finalize_chat_completion as finalize_chat_completion
    from arthex.utils.chat_streams import init_chat_completion as init_chat_completion
    from arthex.utils.chat_streams import update_chat_completion as update_chat_completion

    __all__ = [
        "IncompleteChatCompletionStreamError",
        "consume_chat_completion_stream",
        "consume_sync_chat_completion_stream",
        "finalize_chat_completion",
        "init_chat_completion",
        "update_chat_completion",
    ]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
