"""Timing helpers and the table every benchmark prints."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence


def best_of(repeats: int, run: Callable[[], object]) -> float:
    """The fastest of `repeats` timings of `run`, in seconds (the least noisy estimate)."""
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return best


def print_table(title: str, header: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    cells = [[str(c) for c in header], *[[_fmt(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    print(f"\n## {title}\n")
    print("| " + " | ".join(c.ljust(w) for c, w in zip(cells[0], widths, strict=True)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in cells[1:]:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |")


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)
