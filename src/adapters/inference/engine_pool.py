"""What the Local and Tinker backends share to serve their runs: a pool of engines, each with
the OpenAI-compatible server in front of it, and the table of runs a backend has open.

A pool keys its engines by what they are built for (the base model, or the tokenizer a Tinker
engine renders with). Runs of one key share an engine and a server, unless a run's served
name (its model's `name`; ModelSpec.served_name) is already taken on it (names are the
engine's keys): that run gets a second one, so two runs of one name are served under the same
names by two endpoints. Each step is served as `{name}@{step}`, and `{name}` is moved to the
newest step once it is loaded, so a request for the plain name never sees a gap.

One loopback API key guards every server of a backend: a server on 127.0.0.1 is still
reachable by every local user, so it is never left open (a random key when none is given).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Awaitable, Callable, Iterable
from typing import Generic, TypeVar

import attrs

from ...core.errors import (
    BackendError,
    MissingExtraError,
    NotRegisteredError,
    ServingUnavailableError,
)
from ...core.identity import RunRef, step_name
from ...ports.training_backend import InferenceEndpoint
from .engine import ServingEngine

R = TypeVar("R")


@attrs.define
class Serving:
    """One engine and the server in front of it, shared by the runs of one key."""

    key: str
    engine: ServingEngine
    stop_server: Callable[[], Awaitable[None]]
    follow_loop: Callable[[], None]  # the server onto the running loop if its own has ended
    base_url: str
    names: set[str] = attrs.field(factory=set)


class ServingPool:
    """The engines and servers of one backend (`owner` names it in errors)."""

    def __init__(self, owner: str, *, api_key: str | None = None, extra: str = "local") -> None:
        self.owner = owner
        self.extra = extra
        self._api_key = api_key
        self._servings: list[Serving] = []

    @property
    def api_key(self) -> str:
        if self._api_key is None:
            self._api_key = secrets.token_urlsafe(24)
        return self._api_key

    async def serving_for(
        self, key: str, name: str, make_engine: Callable[[], ServingEngine]
    ) -> Serving:
        """The serving of `key` where `name` is free, started (engine, then server) when
        there is none; the name is taken on it."""
        for serving in self._servings:
            if serving.key == key and name not in serving.names:
                serving.names.add(name)
                return serving
        try:
            from .http_server import InferenceServer
        except ImportError as exc:
            raise MissingExtraError(exc.name or "fastapi", self.extra) from exc
        engine = make_engine()
        await engine.start()
        server = InferenceServer(engine, api_key=self.api_key)
        try:
            base_url = await server.start()
        except BaseException:
            await engine.close()
            raise
        serving = Serving(
            key=key,
            engine=engine,
            stop_server=server.stop,
            base_url=base_url,
            follow_loop=server.follow_running_loop,
        )
        serving.names.add(name)
        self._servings.append(serving)
        return serving

    def release(self, serving: Serving, name: str) -> None:
        """Give `name` back on `serving` (its run failed to open), so a retry lands there."""
        serving.names.discard(name)

    def endpoint(self, serving: Serving, served: str) -> InferenceEndpoint:
        """The endpoint of a run served as `served` (its ModelSpec's `served_name`)."""
        return InferenceEndpoint(
            base_url=serving.base_url,
            api_key=self.api_key,
            model_name=served,
            follow_loop=serving.follow_loop,
        )

    async def serve_step(
        self,
        serving: Serving,
        run: RunRef,
        served: str,
        step: int,
        source: str,
        *,
        latest: bool = True,
    ) -> None:
        """Serve `{name}@{step}` from `source` (a checkpoint directory, a sampler path), then
        point `{name}` at it (unless `latest=False`: an older step served on request). A step
        that is saved but cannot be served is a ServingUnavailableError (a BackendError) that
        says so (the checkpoint stays)."""
        name = step_name(served, step)
        try:
            await serving.engine.load(name, source)
            if latest:
                serving.engine.alias(served, name)
        except Exception as exc:
            raise ServingUnavailableError(
                f"checkpoint {step} of {run} is saved but could not be served: {exc}"
            ) from exc

    async def unserve_steps(self, serving: Serving, served: str, steps: Iterable[int]) -> None:
        """Stop serving deleted steps (requests already accepted still finish)."""
        for step in steps:
            name = step_name(served, step)
            if serving.engine.is_served(name):
                await serving.engine.unload(name)

    async def forget(self, serving: Serving, served: str) -> None:
        """Stop serving `served` and each of its `{served}@{step}` on `serving` (requests
        already accepted still finish), then give the name back: the run it served is gone
        (its model deleted), and the same name opened again loads its steps afresh."""
        for name in serving.engine.served_models():  # the plain name (an alias) sorts first
            if _names_step_of(name, served) and serving.engine.is_served(name):
                await serving.engine.unload(name)
        serving.names.discard(served)

    async def close(self) -> None:
        """Stop every server, then its engine."""
        servings, self._servings = self._servings, []
        for serving in servings:
            with contextlib.suppress(Exception):
                await serving.stop_server()
            await serving.engine.close()


def _names_step_of(name: str, served: str) -> bool:
    """`name` is `served` itself or one of its steps (`{served}@{step}`)."""
    if name == served:
        return True
    before, at, step = name.rpartition("@")
    return bool(at) and before == served and step.isascii() and step.isdigit()


class RunTable(Generic[R]):
    """The runs a backend has open: each opened once (concurrent registers of one run wait
    for the first), and looked up with the same errors on every backend: not registered, or
    the backend was closed (which forgets every run; "register first" would send the caller
    to a backend that refuses)."""

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self._runs: dict[RunRef, R] = {}
        self._lock: asyncio.Lock | None = None
        self.closed = False

    def check_open(self) -> None:
        if self.closed:
            raise BackendError(f"this {self.owner} is closed; create a new one")

    async def open(
        self,
        run: RunRef,
        opener: Callable[[], Awaitable[R]],
        discard: Callable[[R], Awaitable[None]] | None = None,
    ) -> R:
        """The run's state, opened once. A backend closed while `opener` ran gets the state
        handed to `discard` (it never reaches the table `close` already emptied, so nothing
        else would release it) and the caller gets the closed-backend error."""
        self.check_open()
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            state = self._runs.get(run)
            if state is None:
                state = await opener()
                if self.closed:
                    if discard is not None:
                        await discard(state)
                    raise self._closed_error(run)
                self._runs[run] = state
            return state

    async def forget(self, run: RunRef) -> R | None:
        """Drop one run (its model was deleted) and return its state, for the owner to
        release what it holds; None when it is not open. An `open` of any run in flight
        finishes first (so a register racing this one is dropped too, never left half-open),
        and a later `open` of the run opens it afresh."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            return self._runs.pop(run, None)

    def get(self, run: RunRef) -> R | None:
        return self._runs.get(run)

    def __contains__(self, run: object) -> bool:
        return run in self._runs

    def __len__(self) -> int:
        return len(self._runs)

    def require(self, run: RunRef) -> R:
        if self.closed:
            raise self._closed_error(run)
        state = self._runs.get(run)
        if state is None:
            raise NotRegisteredError(
                f"model {run} is not registered with this {self.owner}; call "
                "`await model.register(backend)` first"
            )
        return state

    def _closed_error(self, run: RunRef) -> BackendError:
        return BackendError(
            f"this {self.owner} is closed, so it no longer trains or serves {run}; create "
            f"a new {self.owner} and `await model.register(backend)` to continue from the "
            "latest checkpoint"
        )

    def close(self) -> list[R]:
        """Forget every run; returns them, for the owner to release what they hold."""
        self.closed = True
        runs = list(self._runs.values())
        self._runs.clear()
        return runs
