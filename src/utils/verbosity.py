"""`Verbosity`: how much a step prints, as ART's `art.types.Verbosity` spells it.

0 nothing, 1 a summary, 2 the details. ART's packing function takes it; arthex's own calls
take `verbose: bool` (`backend.train(..., verbose=True)`), which is 0 or 1 here. Scripts that
annotate their own functions with ART's type keep it."""

from __future__ import annotations

from typing import Literal, TypeAlias

__all__ = ["Verbosity"]

Verbosity: TypeAlias = Literal[0, 1, 2]
