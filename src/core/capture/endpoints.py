"""Which URLs a capture scope records: the chat-completions route of the watched endpoints.

A registered model's endpoint is watched by every scope that does not name its own (the
model registers its `base_url` when it registers with a backend), so an agent's calls through
`model.openai_client()` and through any client built from the same `base_url` (a framework's
own OpenAI client) are recorded, while calls to other services (a judge, a search API) are
not. Loopback spellings (`localhost`, `127.0.0.1`, `::1`) count as one host, so a client
configured with either reaches the same watched endpoint.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Literal, TypeAlias
from urllib.parse import urlsplit

from ..errors import InvalidInputError

CHAT_COMPLETIONS = "/chat/completions"
_LOOPBACK = {"localhost", "127.0.0.1", "::1", "[::1]", "0.0.0.0"}
_DEFAULT_PORTS = {"http": 80, "https": 443}

Endpoints: TypeAlias = Iterable[str] | Literal["any"] | None
"""What a scope watches: None (every registered endpoint), "any" (any chat-completions URL),
or base URLs."""

_Key: TypeAlias = tuple[str, str, int, str]

_registered: set[_Key] = set()
_lock = threading.Lock()


def _key(url: str) -> _Key:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        raise InvalidInputError(f"an endpoint must be an http(s) URL with a host, got {url!r}")
    host = parts.hostname.lower()
    if host in _LOOPBACK:
        host = "localhost"  # one of the spellings: no other host can share its key
    try:
        port = parts.port or _DEFAULT_PORTS[scheme]
    except ValueError as error:
        raise InvalidInputError(f"the endpoint {url!r} has a bad port: {error}") from error
    return scheme, host, port, parts.path.rstrip("/")


def register_endpoint(base_url: str) -> None:
    """Watch `base_url` in every scope that does not name its own endpoints."""
    key = _key(base_url)
    with _lock:
        _registered.add(key)


def registered_endpoints() -> frozenset[_Key]:
    with _lock:
        return frozenset(_registered)


class EndpointFilter:
    """Decides whether a request URL is a chat-completions call to a watched endpoint."""

    def __init__(self, endpoints: Endpoints) -> None:
        self._any = endpoints == "any"
        self._fixed: frozenset[_Key] | None = None
        if endpoints is not None and not self._any:
            if isinstance(endpoints, str):
                raise InvalidInputError(
                    f"endpoints must be a list of base URLs, 'any' or None, got {endpoints!r}"
                )
            self._fixed = frozenset(_key(url) for url in endpoints)

    def watches(self, url: str) -> bool:
        try:
            scheme, host, port, path = _key(url)
        except InvalidInputError:
            return False
        if not path.endswith(CHAT_COMPLETIONS):
            return False
        if self._any:
            return True
        base = (scheme, host, port, path[: -len(CHAT_COMPLETIONS)])
        watched = self._fixed if self._fixed is not None else registered_endpoints()
        return base in watched
