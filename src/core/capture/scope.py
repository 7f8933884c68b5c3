"""Capture scopes: every chat-completion call made inside one is recorded into its trajectory.

A scope lives in a context variable, so asyncio tasks (and `asyncio.to_thread` workers) started
inside a scope record into it, while concurrent scopes in sibling tasks never see each other's
calls. Scopes nest: a call belongs to the innermost scope only. `no_capture()` hides every
enclosing scope for a region (a scope opened inside it records again).

A session scope is the other kind: it is not in any context, and records the calls that carry
its session id in the `X-Session-ID` header (`SESSION_HEADER`), from whatever task or thread
sends them. It is for a program whose model calls are relayed by a server running outside the
rollout's context (verifiers' interception server sends each upstream call with its trace id in
that header): `open_session_scope(trajectory, endpoints)`, `bind_session(scope, id)` for each
id whose calls it takes, `close_session_scope(scope, error)`.

The scope knows nothing of HTTP. The transport hook (an adapter, installed the first time a
scope opens) asks `recorder_for(method, url, session)` for the scope that wants a request, then
hands it the request and response bodies; the scope parses them and appends a
`ChatCompletionsExchange`. Nothing a hook reports ever raises into the agent's call: a body
that does not parse, or a streamed call (recorded by nobody), is counted on the trajectory
(`capture_skipped_calls`) and logged.
"""

from __future__ import annotations

import contextvars
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from openai.types.chat import ChatCompletion
from pydantic import ValidationError

from ..errors import InvalidInputError
from ..exchanges import ChatCompletionsExchange
from ..trajectories import INCOMPLETE_KEY, Trajectory
from .endpoints import EndpointFilter

logger = logging.getLogger("arthex.capture")

SKIPPED_METRIC = "capture_skipped_calls"
ERROR_KEY = "capture_error"
SESSION_HEADER = "X-Session-ID"
"""The request header a session scope is keyed by."""

_scopes: contextvars.ContextVar[tuple[Scope, ...]] = contextvars.ContextVar(
    "arthex_capture_scopes", default=()
)
_sessions: dict[str, Scope] = {}
_sessions_lock = threading.Lock()
_hooks: list[Callable[[], None]] = []
_hooks_done: set[int] = set()
_hooks_lock = threading.Lock()


def add_transport_hook(install: Callable[[], None]) -> None:
    """Register an installer run (once) when the first scope opens."""
    with _hooks_lock:
        if install not in _hooks:
            _hooks.append(install)


def _install_hooks() -> None:
    with _hooks_lock:
        if not _hooks:
            logger.warning(
                "no transport hook is registered, so this scope records nothing: open scopes "
                "through arthex.capture (importing arthex.composition.capture registers the hook)"
            )
        pending = [hook for hook in _hooks if id(hook) not in _hooks_done]
        for hook in pending:
            hook()
            _hooks_done.add(id(hook))


class PendingCall:
    """A request a scope wants, between sending it and receiving the whole response."""

    def __init__(self, scope: Scope, request: dict[str, Any]) -> None:
        self.scope = scope
        self.request = request
        self.started = datetime.now(UTC)

    @property
    def streamed(self) -> bool:
        return self.request.get("stream") is True

    def finish(self, status: int, body: bytes) -> None:
        """Record the response (2xx only: a failed call is the agent's to see and handle)."""
        if not 200 <= status < 300:
            return
        try:
            response = ChatCompletion.model_validate_json(body)
            exchange = ChatCompletionsExchange(
                start_time=self.started,
                end_time=datetime.now(UTC),
                request=self.request,
                response=response,
            )
        except (ValidationError, ValueError) as error:
            self.scope.skip(f"the response is not a chat completion ({type(error).__name__})")
            return
        self.scope.add(exchange)

    def skip(self, reason: str) -> None:
        self.scope.skip(reason)


class Scope:
    """One open capture: the trajectory it records into and the endpoints it watches."""

    def __init__(self, trajectory: Trajectory, endpoints: EndpointFilter) -> None:
        self.trajectory = trajectory
        self.endpoints = endpoints
        self.open = True
        self.sessions: set[str] = set()  # the session ids bound to it (a session scope)
        self._lock = threading.Lock()
        self._started = time.monotonic()

    def begin(self, body: bytes | None) -> PendingCall | None:
        """A pending call for a request body, or None when the body is not a JSON object."""
        if body is None:
            self.skip("the request body was not readable")
            return None
        try:
            request = json.loads(body)
        except ValueError:
            request = None
        if not isinstance(request, dict):
            self.skip("the request body is not a JSON object")
            return None
        return PendingCall(self, request)

    def add(self, exchange: ChatCompletionsExchange) -> None:
        with self._lock:
            if not self.open:
                logger.debug("a call finished after its capture scope closed; not recorded")
                return
            self.trajectory.exchanges.chat_completions.append(exchange)

    def skip(self, reason: str) -> None:
        with self._lock:
            if not self.open:
                return
            metrics = self.trajectory.metrics
            metrics[SKIPPED_METRIC] = int(metrics.get(SKIPPED_METRIC, 0)) + 1
        logger.warning("a call in a capture scope was not recorded: %s", reason)

    def close(self, error: BaseException | None) -> None:
        with self._lock:
            self.open = False
        trajectory = self.trajectory
        trajectory.metrics["duration"] = time.monotonic() - self._started
        if error is not None:
            trajectory.metadata[INCOMPLETE_KEY] = True
            trajectory.metadata[ERROR_KEY] = f"{type(error).__name__}: {error}"
            trajectory.log(f"capture ended by {type(error).__name__}: {error}")


def recorder_for(method: str, url: str, session: str | None = None) -> Scope | None:
    """The scope that records this request: the session scope bound to its `session` header
    when there is one, else the innermost scope of the current context; either only when it
    watches the URL."""
    if method.upper() != "POST":
        return None
    if session:
        with _sessions_lock:
            bound = _sessions.get(session)
        if bound is not None:
            return bound if bound.open and bound.endpoints.watches(url) else None
    scopes = _scopes.get()
    if not scopes:
        return None
    scope = scopes[-1]
    return scope if scope.open and scope.endpoints.watches(url) else None


def current_trajectory(*, require: bool = False) -> Trajectory | None:
    """The trajectory of the innermost capture scope (None outside any, or an error when
    `require`): rollout code sets its reward or metadata through it."""
    scopes = _scopes.get()
    if scopes:
        return scopes[-1].trajectory
    if require:
        raise InvalidInputError(
            "no capture scope is open here; call this inside `async with arthex.capture()`"
        )
    return None


@contextmanager
def no_capture() -> Iterator[None]:
    """Record nothing in this region (a scope opened inside it records again)."""
    token = _scopes.set(())
    try:
        yield
    finally:
        _scopes.reset(token)


def open_scope(trajectory: Trajectory | None, endpoints: EndpointFilter) -> tuple[Scope, Any]:
    """Push a new scope; returns it and the token that pops it (`close_scope`)."""
    scope = _new_scope(trajectory, endpoints)
    _install_hooks()
    token = _scopes.set((*_scopes.get(), scope))
    return scope, token


def _new_scope(trajectory: Trajectory | None, endpoints: EndpointFilter) -> Scope:
    if trajectory is None:
        trajectory = Trajectory()
    elif not isinstance(trajectory, Trajectory):
        raise InvalidInputError(
            f"trajectory must be an arthex Trajectory, got {type(trajectory).__name__}"
        )
    elif trajectory.is_legacy():
        raise InvalidInputError(
            "capture records into a trajectory without messages_and_choices, tools or "
            "additional_histories; pass a fresh Trajectory (or none)"
        )
    return Scope(trajectory, endpoints)


def close_scope(scope: Scope, token: Any, error: BaseException | None) -> None:
    scopes = _scopes.get()
    if not scopes or scopes[-1] is not scope:
        scope.close(error)
        raise RuntimeError("capture scopes must close in the order they opened (innermost first)")
    _scopes.reset(token)
    scope.close(error)


def open_session_scope(trajectory: Trajectory | None, endpoints: EndpointFilter) -> Scope:
    """A scope that records the calls of the sessions bound to it (`bind_session`), from any
    task or thread; it is in no context. Close it with `close_session_scope`."""
    scope = _new_scope(trajectory, endpoints)
    _install_hooks()
    return scope


def bind_session(scope: Scope, session: str) -> None:
    """Record the calls whose `X-Session-ID` header is `session` into `scope`."""
    if not isinstance(session, str) or not session:
        raise InvalidInputError(f"a session id is a non-empty string, got {session!r}")
    with _sessions_lock:
        held = _sessions.get(session)
        if held is not None and held is not scope:
            raise InvalidInputError(f"session {session!r} is already bound to another scope")
        _sessions[session] = scope
        scope.sessions.add(session)


def close_session_scope(scope: Scope, error: BaseException | None) -> None:
    """Unbind the scope's sessions and close it (idempotent)."""
    with _sessions_lock:
        for session in scope.sessions:
            if _sessions.get(session) is scope:
                del _sessions[session]
        scope.sessions.clear()
    if scope.open:
        scope.close(error)
