"""ART's `art.tinker_native.data`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.adapters.tinker.art_data import build_datum as build_datum
    from arthex.adapters.tinker.art_data import compute_advantages as compute_advantages
    from arthex.adapters.tinker.art_data import (
        convert_openai_messages_to_renderer_format as convert_openai_messages_to_renderer_format,
    )
    from arthex.adapters.tinker.art_data import (
        create_conversation_prefix_with_tools as create_conversation_prefix_with_tools,
    )
    from arthex.adapters.tinker.art_data import (
        extract_logprobs_from_choice as extract_logprobs_from_choice,
    )
    from arthex.adapters.tinker.art_data import find_last_choice as find_last_choice
    from arthex.adapters.tinker.art_data import history_to_datum as history_to_datum
    from arthex.adapters.tinker.art_data import (
        iter_trajectory_histories as iter_trajectory_histories,
    )
    from arthex.adapters.tinker.art_data import (
        parse_completion_to_openai_message as parse_completion_to_openai_message,
    )
    from arthex.adapters.tinker.art_data import (
        trajectory_groups_to_datums as trajectory_groups_to_datums,
    )

    __all__ = [
        "build_datum",
        "compute_advantages",
        "convert_openai_messages_to_renderer_format",
        "create_conversation_prefix_with_tools",
        "extract_logprobs_from_choice",
        "find_last_choice",
        "history_to_datum",
        "iter_trajectory_histories",
        "parse_completion_to_openai_message",
        "trajectory_groups_to_datums",
    ]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
