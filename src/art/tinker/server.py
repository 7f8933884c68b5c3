"""ART's `art.tinker.server`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.adapters.tinker.openai_server import (
        TinkerOpenAIServer as OpenAICompatibleTinkerServer,
    )
    from arthex.adapters.tinker.openai_server import get_free_port as get_free_port
    from arthex.adapters.tinker.openai_wire import (
        MessagesAndChoicesWithLogprobs as MessagesAndChoicesWithLogprobs,
    )
    from arthex.adapters.tinker.openai_wire import (
        MessagesAndChoicesWithLogprobsArgs as MessagesAndChoicesWithLogprobsArgs,
    )
    from arthex.adapters.tinker.openai_wire import ModelList as ModelList
    from arthex.adapters.tinker.openai_wire import ModelUpsert as ModelUpsert
    from arthex.adapters.tinker.openai_wire import WireMessagesAndChoices as WireMessagesAndChoices
    from arthex.adapters.tinker.tenants import ApiKeyTenant as OpenAICompatibleTinkerServerTenant

    __all__ = [
        "MessagesAndChoicesWithLogprobs",
        "MessagesAndChoicesWithLogprobsArgs",
        "ModelList",
        "ModelUpsert",
        "OpenAICompatibleTinkerServer",
        "OpenAICompatibleTinkerServerTenant",
        "WireMessagesAndChoices",
        "get_free_port",
    ]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
