"""Coloured one-line progress prints for scripts: `[12:03:09] STEP  loading the model`.

ART's `art.utils.logging` helpers, written for arthex: each prints one line to stdout, the
local wall-clock time first, then a coloured label padded to one width so the messages line
up; `dim` prints its message faint, without a time. The lines are for a person watching a
script; arthex's own records go through the `arthex` logger."""

from __future__ import annotations

import time

__all__ = ["dim", "err", "info", "ok", "step", "warn"]

_RESET = "\x1b[0m"
_FAINT = "\x1b[2m"
_LABEL_WIDTH = 6  # the longest label, "INFO"/"STEP"/"WARN", and two spaces


def _line(label: str, colour: str, msg: object) -> None:
    stamp = time.strftime("%H:%M:%S")
    print(f"[{stamp}] \x1b[{colour}m{label}{_RESET}{' ' * (_LABEL_WIDTH - len(label))}{msg}")


def info(msg: object) -> None:
    """`[HH:MM:SS] INFO  msg`, the label blue."""
    _line("INFO", "34", msg)


def step(msg: object) -> None:
    """`[HH:MM:SS] STEP  msg`, the label cyan."""
    _line("STEP", "36", msg)


def ok(msg: object) -> None:
    """`[HH:MM:SS] OK    msg`, the label green."""
    _line("OK", "32", msg)


def warn(msg: object) -> None:
    """`[HH:MM:SS] WARN  msg`, the label yellow."""
    _line("WARN", "33", msg)


def err(msg: object) -> None:
    """`[HH:MM:SS] ERR   msg`, the label red (on stdout, as the other lines)."""
    _line("ERR", "31", msg)


def dim(msg: object) -> None:
    """`msg` in faint text, with no time or label."""
    print(f"{_FAINT}{msg}{_RESET}")
