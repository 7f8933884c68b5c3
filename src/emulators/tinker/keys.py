"""Which API keys the tinker emulator accepts: any key of the SDK's shape, or only the one it
was given. It is the emulator's one request check of its own; everything else a request may be
is the Tinker server's (apps/server/tinker_protocol)."""

from __future__ import annotations

import hashlib
import secrets

from ...apps.server.guard import OPEN_TENANT
from ...core.errors import InvalidInputError

__all__ = ["SDK_KEY_PREFIXES", "OpenKeys", "check_api_key"]

SDK_KEY_PREFIXES = ("tml-", "eyJ")  # the SDK's API keys, and its JWTs


def check_api_key(api_key: str | None) -> None:
    """Refuse a configured key the SDK would not send (it requires `tml-...`)."""
    if api_key is not None and not api_key.startswith(SDK_KEY_PREFIXES):
        raise InvalidInputError(
            f"api_key must start with 'tml-' as the tinker SDK requires, got {api_key[:4]!r}..."
        )


class OpenKeys:
    """The emulator's keys: any key of the SDK's shape, or only `api_key`; all one tenant."""

    def __init__(self, api_key: str | None) -> None:
        self.api_key = api_key

    def identify(self, presented: str) -> tuple[str, bytes] | None:
        if self.api_key is not None:
            accepted = secrets.compare_digest(presented, self.api_key)
        else:
            accepted = presented.startswith(SDK_KEY_PREFIXES)
        return (OPEN_TENANT, hashlib.sha256(presented.encode()).digest()) if accepted else None
