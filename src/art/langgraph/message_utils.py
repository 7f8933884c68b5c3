"""ART's `art.langgraph.message_utils`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.composition.langgraph import MESSAGE_PARAMS as role_to_param
    from arthex.composition.langgraph import Message as Message
    from arthex.composition.langgraph import (
        convert_langgraph_messages as convert_langgraph_messages,
    )
    from arthex.composition.langgraph import langchain_msg_to_openai as langchain_msg_to_openai
    from arthex.composition.langgraph import make_message_param as make_message_param
    from arthex.core.trajectories import MessagesAndChoices as MessagesAndChoices

    __all__ = [
        "Message",
        "MessagesAndChoices",
        "convert_langgraph_messages",
        "langchain_msg_to_openai",
        "make_message_param",
        "role_to_param",
    ]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
