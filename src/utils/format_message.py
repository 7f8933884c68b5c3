"""A chat message as readable text (ART's `art.utils.format_message`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["format_message"]


def _tool_call_lines(message: Mapping[str, Any]) -> list[str]:
    """`name(arguments)` for each tool call given as a mapping with a `function` mapping; other
    shapes are skipped."""
    lines = []
    for call in message.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(function, Mapping):
            lines.append(f"{function.get('name')}({function.get('arguments')})")
    return lines


def format_message(message: Mapping[str, Any]) -> str:
    """`Role:` on one line, then the content (or the refusal), then a newline when there was
    content, then one line per tool call.

    The role is capitalized; content that is not a string (a list of parts) is written as
    Python writes it, as ART does."""
    text = message.get("content", message.get("refusal", "")) or ""
    separator = "\n" if text else ""
    calls = "\n".join(_tool_call_lines(message))
    return f"{str(message['role']).capitalize()}:\n{text}{separator}{calls}"
