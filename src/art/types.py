"""ART's `art.types`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.adapters.serverless.api_types import (
        SFTMetricLogging as SFTMetricLoggingConfig,
    )
    from arthex.adapters.train_results import LocalTrainResult as LocalTrainResult
    from arthex.adapters.train_results import ServerlessTrainResult as ServerlessTrainResult
    from arthex.core.chat_types import Message as Message
    from arthex.core.chat_types import MessageOrChoice as MessageOrChoice
    from arthex.core.chat_types import Messages as Messages
    from arthex.core.chat_types import MessagesAndChoices as MessagesAndChoices
    from arthex.core.chat_types import Tools as Tools
    from arthex.core.config import TrainConfig as TrainConfig
    from arthex.core.model import TrainResult as TrainResult
    from arthex.core.sft import TrainSFTConfig as TrainSFTConfig
    from arthex.utils.verbosity import Verbosity as Verbosity

    __all__ = [
        "LocalTrainResult",
        "Message",
        "MessageOrChoice",
        "Messages",
        "MessagesAndChoices",
        "SFTMetricLoggingConfig",
        "ServerlessTrainResult",
        "Tools",
        "TrainConfig",
        "TrainResult",
        "TrainSFTConfig",
        "Verbosity",
    ]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
