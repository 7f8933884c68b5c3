"""ART's `art.types`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.core.chat_types import Message as Message
    from arthex.core.chat_types import MessageOrChoice as MessageOrChoice
    from arthex.core.chat_types import Messages as Messages
    from arthex.core.chat_types import MessagesAndChoices as MessagesAndChoices
    from arthex.core.chat_types import Tools as Tools
    from arthex.core.config import TrainConfig as TrainConfig
    from arthex.core.model import TrainResult as TrainResult
    from arthex.core.sft import TrainSFTConfig as TrainSFTConfig

    __all__ = [
        "Message",
        "MessageOrChoice",
        "Messages",
        "MessagesAndChoices",
        "Tools",
        "TrainConfig",
        "TrainResult",
        "TrainSFTConfig",
    ]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
