"""The transport hook that feeds capture scopes: `Client.send` and `AsyncClient.send` of httpx
and of httpx2 (the client family recent OpenAI SDKs are built on), whichever are installed.

The OpenAI SDK, and the frameworks built on it (langchain-openai, openai-agents), send every
request through one of these methods, whatever transport the client was built with. Wrapping
them at the class catches every client built from a watched endpoint's `base_url` without the
agent passing anything. Outside a capture scope the cost is one context-variable lookup per
request (and one dictionary lookup for a request with an `X-Session-ID` header, the key of
session scopes).

The whole response body is read before it is handed back: a chat completion is one JSON
document the caller reads anyway, and reading it here means the scope records it even if the
caller never does. Streamed calls are passed through untouched and counted as not recorded.
"""

from __future__ import annotations

import importlib
import threading
from types import ModuleType
from typing import Any

from ..core.capture.scope import SESSION_HEADER, PendingCall, recorder_for

_MARK = "_arthex_capture"
_FAMILIES = ("httpx", "httpx2")
_STREAMED = "streamed responses are not recorded; call without stream=True"
_lock = threading.Lock()


def _pending(module: ModuleType, request: Any) -> PendingCall | None:
    scope = recorder_for(request.method, str(request.url), request.headers.get(SESSION_HEADER))
    if scope is None:
        return None
    try:
        body: bytes | None = request.content
    except module.RequestNotRead:
        body = None
    return scope.begin(body)


def _wrap(module: ModuleType) -> None:
    if getattr(module.AsyncClient.send, _MARK, False):
        return
    original_async = module.AsyncClient.send
    original_sync = module.Client.send

    async def async_send(self: Any, request: Any, **kwargs: Any) -> Any:
        pending = _pending(module, request)
        response = await original_async(self, request, **kwargs)
        if pending is None:
            return response
        if pending.streamed:
            pending.skip(_STREAMED)
        elif 200 <= response.status_code < 300:
            await response.aread()
            pending.finish(response.status_code, response.content)
        return response

    def sync_send(self: Any, request: Any, **kwargs: Any) -> Any:
        pending = _pending(module, request)
        response = original_sync(self, request, **kwargs)
        if pending is None:
            return response
        if pending.streamed:
            pending.skip(_STREAMED)
        elif 200 <= response.status_code < 300:
            response.read()
            pending.finish(response.status_code, response.content)
        return response

    setattr(async_send, _MARK, True)
    setattr(sync_send, _MARK, True)
    module.AsyncClient.send = async_send
    module.Client.send = sync_send


def install() -> None:
    """Wrap the send methods of every installed client family, once (idempotent)."""
    with _lock:
        for name in _FAMILIES:
            try:
                module = importlib.import_module(name)
            except ImportError:
                continue
            _wrap(module)
