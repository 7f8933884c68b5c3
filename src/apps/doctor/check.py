"""One check's result: its status, what it found and, when not ok, what to do."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

import attrs

Status = Literal["ok", "warn", "fail"]
_CODES: dict[Status, int] = {"ok": 0, "warn": 1, "fail": 2}


@attrs.frozen
class Check:
    """`name` is the topic ("torch", "memory", "history"), `message` what was found, `fix`
    the one thing to do about it (empty when ok)."""

    name: str
    status: Status
    message: str
    fix: str = ""

    def line(self) -> str:
        """`warn  lease: ... -> fix`: the line the command prints."""
        fix = f" -> {self.fix}" if self.fix else ""
        return f"{self.status:<4}  {self.name}: {self.message}{fix}"


def ok(name: str, message: str) -> Check:
    return Check(name, "ok", message)


def warn(name: str, message: str, fix: str) -> Check:
    return Check(name, "warn", message, fix)


def fail(name: str, message: str, fix: str) -> Check:
    return Check(name, "fail", message, fix)


def exit_code(checks: Iterable[Check]) -> int:
    """0 when all are ok, 1 with a warning, 2 with a failure."""
    return max((_CODES[check.status] for check in checks), default=0)
