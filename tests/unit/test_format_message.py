"""`format_message` (ART's `art.utils.format_message`) on worked examples: `Role:`, a line
break, the content or refusal, a line break after content, one `name(arguments)` line per
tool call (tests/interop/test_art_small_utils.py compares more cases with ART's own)."""

from __future__ import annotations

from arthex.art.utils.format_message import format_message


def test_content_then_a_line_break() -> None:
    assert format_message({"role": "user", "content": "hi"}) == "User:\nhi\n"
    assert format_message({"role": "system", "content": ""}) == "System:\n"
    assert format_message({"role": "assistant", "refusal": "no"}) == "Assistant:\nno\n"


def test_tool_calls_one_line_each_and_odd_shapes_skipped() -> None:
    call = {"id": "1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
    message = {"role": "assistant", "content": None, "tool_calls": [call, "x", {"function": 1}]}
    assert format_message(message) == 'Assistant:\nf({"a": 1})'
    message = {"role": "assistant", "content": "so", "tool_calls": [call, call]}
    assert format_message(message) == 'Assistant:\nso\nf({"a": 1})\nf({"a": 1})'
