"""The emulator's errors, and the one rule for names a request may give a checkpoint."""

from __future__ import annotations

import re

FILES_PREFIX = "/files/"  # signed download URLs: the signature, not the API key, admits them
CHECKPOINT_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")


class UserError(Exception):
    """The request was wrong (the SDK gets `category: user`); the message says how."""


class HttpError(Exception):
    """Answered as `{"detail": message}` with this status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def checkpoint_name(name: object) -> str:
    if not isinstance(name, str) or not CHECKPOINT_NAME.fullmatch(name):
        raise HttpError(
            400, f"checkpoint name {name!r} must be 1-128 letters, digits, '_', '-' or '.'"
        )
    return name
