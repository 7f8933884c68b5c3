"""The serverless clients' one HTTP layer: a base URL and key, an httpx client per event loop,
retries with backoff, and each error answer raised as arthex's error for it.

`ServerlessBackend` (client.py) and the hosted API's resource client (api.py) both send every
request through a `ServerlessTransport`, so they retry, time out and fail the same way.

Retries: GET, PUT and DELETE are retried with exponential backoff on connection errors, 429
and 500/502/503/504; a POST is retried only on a 429 `rate_limit_exceeded` (refused before the
server acted), never otherwise, since the server may have acted on it.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ...core.errors import InvalidInputError
from . import export, wire
from .client_http import httpx_module, raise_for_status, retryable, ssl_context, transport_error

if TYPE_CHECKING:
    import httpx

__all__ = [
    "HOSTED_KEY_ENV",
    "KEY_ENV",
    "MAX_BACKOFF_S",
    "URL_ENV",
    "ServerlessTransport",
    "server_of",
]

MAX_BACKOFF_S = 8.0
URL_ENV = "ARTHEX_SERVERLESS_URL"
KEY_ENV = export.KEY_ENV
HOSTED_KEY_ENV = "WANDB_API_KEY"  # the hosted service's keys, as ART's client reads them


def server_of(base_url: str | None, api_key: str | None, who: str) -> tuple[str, str]:
    """(base URL, key) of a client: the arguments, else `ARTHEX_SERVERLESS_URL` and
    `ARTHEX_API_KEY` (then `WANDB_API_KEY`); with no URL at all, the hosted service's. A
    missing key is refused, naming `who` asked."""
    url = base_url if base_url is not None else os.environ.get(URL_ENV)
    key = api_key if api_key is not None else os.environ.get(KEY_ENV)
    key = key or os.environ.get(HOSTED_KEY_ENV)
    if not key:
        raise InvalidInputError(
            f"{who} needs an API key: pass api_key= or set {KEY_ENV} (or {HOSTED_KEY_ENV} "
            "for the hosted service)"
        )
    return url or wire.DEFAULT_BASE_URL, key


class ServerlessTransport:
    """Requests to one training server with one key. `headers` go with every request beside
    the key's; `transport` is an httpx transport for custom networking (a proxy, a unix
    socket), used by the async requests."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 60.0,
        retries: int = 3,
        backoff_s: float = 0.5,
        headers: Mapping[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if retries < 0 or timeout <= 0 or backoff_s < 0:
            raise InvalidInputError("timeout must be > 0, retries and backoff_s >= 0")
        self.base_url = wire.api_base(base_url)
        self.api_key = api_key
        self.timeout = timeout
        self.retries = retries
        self.backoff_s = backoff_s
        self.headers = {"Authorization": f"Bearer {api_key}", **(headers or {})}
        self._transport = transport
        self._client: httpx.AsyncClient | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None

    def http(self) -> httpx.AsyncClient:
        """The httpx client of the running event loop, made on first use."""
        loop = asyncio.get_running_loop()
        if self._client is not None and self._client_loop is not loop:
            # made on a loop that has ended (a script's earlier asyncio.run): its pooled
            # connections went with it, so this loop gets a client of its own
            self._client = None
        self._client_loop = loop
        if self._client is None:
            httpx = httpx_module()
            self._client = httpx.AsyncClient(
                base_url=self.base_url,
                timeout=self.timeout,
                verify=ssl_context(),
                headers=self.headers,
                transport=self._transport,
            )
        return self._client

    def open_client(self) -> httpx.AsyncClient | None:
        """The httpx client made on the running loop, if one was; None before the first
        request, and for a client of a loop that has ended (nothing of it can be used here)."""
        if self._client is not None and self._client_loop is asyncio.get_running_loop():
            return self._client
        return None

    async def aclose(self) -> None:
        """Close the running loop's client; a client of an ended loop is only forgotten."""
        client, self._client = self.open_client(), None
        if client is not None:
            await client.aclose()

    async def request(
        self, method: str, path: str, *, extra_timeout: float = 0.0, **kwargs: Any
    ) -> httpx.Response:
        """Send `method path` (under the base URL), retrying as the module says; an error
        answer raises arthex's error for its status and type."""
        httpx = httpx_module()
        client = self.http()
        attempts = self.retries + 1
        timeout = self.timeout + extra_timeout
        for attempt in range(attempts):
            last = attempt + 1 >= attempts
            try:
                response = await client.request(method, path, timeout=timeout, **kwargs)
            except httpx.TransportError as exc:
                if last or method == "POST":
                    raise transport_error(method, path, exc, self.base_url) from exc
                await asyncio.sleep(self.delay(attempt, None))
                continue
            if not last and retryable(method, response):
                await asyncio.sleep(self.delay(attempt, response))
                continue
            raise_for_status(method, path, response)
            return response
        raise AssertionError("unreachable")  # pragma: no cover

    def sync_get(self, path: str) -> httpx.Response:
        """A blocking GET with the same retries, for a property read outside any event loop
        (it does not use `transport`)."""
        module = httpx_module()
        url = self.base_url + path
        client: httpx.Client
        with module.Client(timeout=self.timeout, verify=ssl_context()) as client:
            for attempt in range(self.retries + 1):
                try:
                    response = client.get(url, headers=self.headers)
                except module.TransportError as exc:
                    if attempt >= self.retries:
                        raise transport_error("GET", path, exc, self.base_url) from exc
                    time.sleep(self.delay(attempt, None))
                    continue
                if retryable("GET", response) and attempt < self.retries:
                    time.sleep(self.delay(attempt, response))
                    continue
                raise_for_status("GET", path, response)
                return response
        raise AssertionError("unreachable")  # pragma: no cover

    def delay(self, attempt: int, response: httpx.Response | None) -> float:
        if response is not None:
            retry_after = response.headers.get("retry-after", "")
            if wire.COUNT.fullmatch(retry_after.replace(".", "", 1)) is not None:
                return min(float(retry_after), MAX_BACKOFF_S)
        base = min(self.backoff_s * (2**attempt), MAX_BACKOFF_S)
        return float(base * (0.5 + random.random() / 2))  # jitter: retrying clients do not stampede
