"""Reading a progress line back: the frames a `ProgressLine` drew on its stream, without the
elapsed time (the one part of a frame that depends on the clock)."""

from __future__ import annotations

import re

_FRAME = re.compile(r"^(?P<line>.*?) +\d+\.\ds(?: (?P<note>.*))?$", re.DOTALL)


def frames(drawn: str) -> list[tuple[str, str]]:
    """(line, note) per frame drawn, in order; the closing newline is dropped."""
    found = []
    for frame in drawn.rstrip("\n").split("\r")[1:]:
        match = _FRAME.match(frame)
        assert match, f"not a progress frame: {frame!r}"
        found.append((match["line"], match["note"] or ""))
    return found
