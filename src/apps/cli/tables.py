"""Tables that stay readable in a narrow terminal.

A table wider than the console is printed as several tables, each repeating the leading
columns (the step, the model) and taking as many of the others as fit, so no header and no
value is cut or squeezed into a column too narrow for it. Only a single column wider than the
whole console wraps, and then at character boundaries rather than with an ellipsis.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

import attrs

if TYPE_CHECKING:
    from rich.console import Console

# A rich table with the default box draws one bar per column plus one, and pads each cell by
# one space on either side.
_PER_COLUMN = 3
_EDGE = 1


@attrs.frozen
class Column:
    header: str
    justify: Literal["left", "right"] = "right"


def print_table(
    console: Console, columns: Sequence[Column], rows: Sequence[Sequence[str]], *, keep: int = 1
) -> None:
    """Print `rows` under `columns`, split into several tables when one would not fit."""
    from rich.table import Table

    widths = [
        max([len(column.header), *(len(row[i]) for row in rows)])
        for i, column in enumerate(columns)
    ]
    for chunk in _chunks(widths, keep, console.width):
        table = Table()
        for i in chunk:
            fits = widths[i] + _PER_COLUMN + _EDGE <= console.width
            table.add_column(
                columns[i].header, justify=columns[i].justify, no_wrap=fits, overflow="fold"
            )
        for row in rows:
            table.add_row(*(row[i] for i in chunk))
        console.print(table)


def _chunks(widths: Sequence[int], keep: int, budget: int) -> list[list[int]]:
    """Column indices per table: the first `keep` in every one, then the others in order."""
    leading = list(range(min(keep, len(widths))))
    base = _EDGE + sum(widths[i] + _PER_COLUMN for i in leading)
    chunks: list[list[int]] = []
    current: list[int] = []
    used = base
    for i in range(len(leading), len(widths)):
        need = widths[i] + _PER_COLUMN
        if current and used + need > budget:
            chunks.append(leading + current)
            current, used = [], base
        current.append(i)
        used += need
    chunks.append(leading + current)
    return chunks
