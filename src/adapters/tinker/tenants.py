"""One caller of the Tinker OpenAI-compatible server: its Tinker API key, its aliases, and the
sampling clients opened with its key.

A tenant's `models` map a served alias to a `tinker://` sampler path (or a base model name);
a request's `model` that is no alias is taken as a path or base model itself. Each target is
opened once with the tenant's own ServiceClient (the caller's key: Tinker decides what the key
may sample) and served by the tenant's TinkerSamplingEngine for the target's base model, whose
tokenizer (the base model's chat template) every tenant shares.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Protocol, TypeVar, cast

import attrs

from ...core.errors import ArthexError, BackendError, InvalidInputError
from ..inference.chat import ChatTokenizer
from ..inference.engine import UnknownModelError
from .clients import (
    SamplingClientLike,
    SdkClients,
    ServiceClientLike,
    TinkerNotFound,
    call,
    release,
)
from .engine import TinkerSamplingEngine

__all__ = [
    "AccessRefused",
    "ApiKeyTenant",
    "ClientSlots",
    "TinkerTenant",
    "TokenizerCache",
    "service_status",
]

logger = logging.getLogger("arthex")
TINKER_PATH = "tinker://"
DEFAULT_TIMEOUT_S = 600.0  # each Tinker call
SERVICE_WAIT_S = 30.0  # close(): how long to wait for a ServiceClient still being made
T = TypeVar("T")


def service_status(exc: BaseException) -> int | None:
    """The HTTP status the Tinker service answered, found on the SDK's error behind `exc`."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        status = getattr(current, "status_code", None)
        if isinstance(status, int):
            return status
        current = current.__cause__ or current.__context__
    return None


class AccessRefused(BackendError):
    """Tinker answered 403: the caller's key is valid but may not use this target."""

    status_code = 403

    def __init__(self, model: str, target: str, detail: str) -> None:
        named = repr(target) if model == target else f"{target!r} (alias {model!r})"
        super().__init__(f"Tinker refused access to {named} for this API key: {detail}")


class _KnowsBaseModel(Protocol):
    def get_base_model(self) -> str: ...


class ModelNotFound(UnknownModelError):
    """A request's model is no alias of the caller, and Tinker serves no such path or model."""

    def __init__(self, model: str, detail: str) -> None:
        ArthexError.__init__(
            self,
            f"model not found: {model!r}. A model must be an alias registered with "
            f"PUT /v1/models/{{name}}, a `tinker://` sampler path or a base model the Tinker "
            f"service serves to this API key ({detail})",
        )
        self.model = model


class TokenizerCache:
    """Each base model's chat tokenizer, loaded once (off the event loop) for every tenant;
    `sources` maps a base model to where its tokenizer is (default: the name itself)."""

    def __init__(self, sources: dict[str, str]) -> None:
        self._sources = sources
        self._loading: dict[str, asyncio.Task[ChatTokenizer]] = {}

    async def get(self, base_model: str) -> ChatTokenizer:
        task = self._loading.get(base_model)
        if task is None or (task.done() and (task.cancelled() or task.exception() is not None)):
            source = self._sources.get(base_model, base_model)
            task = asyncio.ensure_future(asyncio.to_thread(ChatTokenizer.load, source))
            self._loading[base_model] = task
        return await asyncio.shield(task)


class ClientSlots:
    """At most `limit` distinct sampling clients of one base model sample at once (ART's
    `max_concurrent_sampling_clients`); a client with several requests in flight holds one."""

    def __init__(self, limit: int) -> None:
        self._slots = asyncio.Semaphore(limit)
        self._users: dict[str, int] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    @contextlib.asynccontextmanager
    async def hold(self, target: str) -> AsyncIterator[None]:
        async with self._locks.setdefault(target, asyncio.Lock()):
            if not self._users.get(target):
                await self._slots.acquire()
            self._users[target] = self._users.get(target, 0) + 1
        try:
            yield
        finally:
            self._users[target] -= 1
            if not self._users[target]:
                del self._users[target]
                self._slots.release()


@attrs.frozen
class _Opened:
    base_model: str
    client: SamplingClientLike


class TinkerTenant:
    """A caller's aliases and clients. `service` makes the caller's ServiceClient (called once,
    off the event loop, when the tenant first samples)."""

    def __init__(
        self,
        service: Callable[[], ServiceClientLike],
        tokenizers: TokenizerCache,
        *,
        max_concurrent_sampling_clients: int,
        timeout_s: float | None,
    ) -> None:
        self.models: dict[str, str] = {}
        self.model_timestamps: dict[str, int] = {}
        self._make_service = service
        self._tokenizers = tokenizers
        self._limit = max_concurrent_sampling_clients
        self._timeout_s = timeout_s
        self._service: asyncio.Task[ServiceClientLike] | None = None
        self._opened: dict[str, asyncio.Task[_Opened]] = {}
        self._engines: dict[str, TinkerSamplingEngine] = {}
        self._slots: dict[str, ClientSlots] = {}
        self._in_use = 0

    # aliases ---------------------------------------------------------------------------

    def put(self, name: str, target: str) -> int:
        """Serve `name` from `target` (a new alias, or re-pointed); its creation time."""
        _check_alias(name, target)
        self.models[name] = target
        return self.model_timestamps.setdefault(name, int(time.time()))

    def replace(self, models: Mapping[str, str]) -> None:
        """Make `models` the aliases (ART's `server.models = ...`: the dict itself is kept, so
        the caller's later edits are the server's). Every pair is checked before anything
        changes; a name that stays keeps its creation time."""
        pairs = list(models.items())  # `models` may be self.models, edited by the caller
        for name, target in pairs:
            _check_alias(name, target)
        now = int(time.time())
        self.model_timestamps = {name: self.model_timestamps.get(name, now) for name, _ in pairs}
        self.models = models if isinstance(models, dict) else dict(pairs)

    def delete(self, name: str) -> bool:
        self.model_timestamps.pop(name, None)
        return self.models.pop(name, None) is not None

    # use -------------------------------------------------------------------------------

    @contextlib.contextmanager
    def in_use(self) -> Iterator[None]:
        """Count a request that is using this tenant (see `idle`)."""
        self._in_use += 1
        try:
            yield
        finally:
            self._in_use -= 1

    @property
    def idle(self) -> bool:
        """No request is using this tenant now."""
        return self._in_use == 0

    # sampling --------------------------------------------------------------------------

    async def open(self, model: str) -> tuple[TinkerSamplingEngine, str]:
        """The engine serving `model` (an alias, a path or a base model) and the name it is
        served under there (the target itself)."""
        target = self.models.get(model, model)
        opened = await self._opened_target(model, target)
        engine = self._engines.get(opened.base_model)
        if engine is None:
            chat = await self._tokenizers.get(opened.base_model)
            engine = self._engines.setdefault(
                opened.base_model,
                TinkerSamplingEngine(opened.base_model, timeout_s=self._timeout_s, chat=chat),
            )
        if not engine.is_served(target):
            engine.serve(target, opened.client)
        return engine, target

    def slots(self, engine: TinkerSamplingEngine) -> ClientSlots:
        return self._slots.setdefault(engine.tokenizer_source, ClientSlots(self._limit))

    async def _opened_target(self, model: str, target: str) -> _Opened:
        task = self._opened.get(target)
        if task is None or (task.done() and (task.cancelled() or task.exception() is not None)):
            task = asyncio.ensure_future(self._open(model, target))
            self._opened[target] = task
        return await _shared(task, f"opening {target!r}")

    async def _open(self, model: str, target: str) -> _Opened:
        service = await self._service_client()
        is_path = target.startswith(TINKER_PATH)
        kwargs = {"model_path": target} if is_path else {"base_model": target}
        try:
            client = await call(
                f"opening a sampling client for {target!r}",
                self._timeout_s,
                service.create_sampling_client,
                **kwargs,
            )
        except (TinkerNotFound, InvalidInputError) as exc:
            raise ModelNotFound(model, str(exc)) from exc
        except BackendError as exc:
            if service_status(exc) == 403:
                raise AccessRefused(model, target, str(exc)) from exc
            raise
        if not is_path:
            return _Opened(target, client)
        if not hasattr(client, "get_base_model"):
            raise BackendError(f"the sampling client for {target!r} does not name its base model")
        return _Opened(cast(_KnowsBaseModel, client).get_base_model(), client)

    async def _service_client(self) -> ServiceClientLike:
        task = self._service
        if task is None or (task.done() and (task.cancelled() or task.exception() is not None)):
            task = self._service = asyncio.ensure_future(asyncio.to_thread(self._make_service))
        return await _shared(task, "starting the Tinker session")

    async def close(self) -> None:
        """Let go of the clients (the aliases stay; a later request opens them again): finish
        the Tinker session, stop serving. A request still waiting for a client being opened
        gets a BackendError. A ServiceClient still being made (on a thread, which cannot be
        stopped) is waited for up to SERVICE_WAIT_S and finished; past that, it is released
        when it is made."""
        service_task, self._service = self._service, None
        opened, self._opened = list(self._opened.values()), {}
        for task in opened:
            task.cancel()
        engines, self._engines = list(self._engines.values()), {}
        for engine in engines:
            await engine.close()
        self._slots.clear()
        if service_task is None:
            return
        if not service_task.done():
            await asyncio.wait({service_task}, timeout=SERVICE_WAIT_S)
            if not service_task.done():
                service_task.add_done_callback(_release_when_made)
                return
        if service_task.cancelled() or service_task.exception() is not None:
            return
        service = service_task.result()
        try:
            await call("finishing the session", 30.0, service.close, "success")
        except BackendError as exc:
            logger.warning("could not finish a Tinker session: %s", exc)
        finally:
            await asyncio.to_thread(release, service, 10.0)


class ApiKeyTenant(TinkerTenant):
    """The tenant of one Tinker API key, ART's `OpenAICompatibleTinkerServerTenant(api_key,
    max_concurrent_sampling_clients)`: its ServiceClient is the pinned SDK's with that key
    (`base_url` None: the SDK's `TINKER_BASE_URL`, then production). `tokenizers` is a base
    model -> tokenizer folder mapping, or a server's TokenizerCache to share."""

    def __init__(
        self,
        api_key: str,
        max_concurrent_sampling_clients: int,
        *,
        base_url: str | None = None,
        tokenizers: TokenizerCache | Mapping[str, str] | None = None,
        timeout_s: float | None = DEFAULT_TIMEOUT_S,
    ) -> None:
        if not isinstance(api_key, str) or not api_key.strip():
            raise InvalidInputError(f"api_key must be a Tinker API key, got {api_key!r}")
        limit = max_concurrent_sampling_clients
        if type(limit) is not int or limit < 1:
            raise InvalidInputError(
                f"max_concurrent_sampling_clients must be a positive integer, got {limit!r}"
            )
        cache = (
            tokenizers
            if isinstance(tokenizers, TokenizerCache)
            else TokenizerCache(dict(tokenizers or {}))
        )
        super().__init__(
            SdkClients(base_url, api_key).service,
            cache,
            max_concurrent_sampling_clients=limit,
            timeout_s=timeout_s,
        )


def _check_alias(name: str, target: str) -> None:
    if not isinstance(name, str) or not name.strip():
        raise InvalidInputError(f"a model alias must be a non-empty name, got {name!r}")
    if not isinstance(target, str) or not target.strip() or target != target.strip():
        raise InvalidInputError(
            f"target must be a `tinker://` sampler path or a base model name, got {target!r} "
            f"for {name!r}"
        )


async def _shared(task: asyncio.Future[T], what: str) -> T:
    """Await a task other requests may await too, without cancelling it when this one is
    cancelled; the task itself cancelled (the tenant closed) is a BackendError."""
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if task.cancelled() and (current is None or not current.cancelling()):
            raise BackendError(
                f"the Tinker session of this API key was closed while {what}"
            ) from None
        raise


def _release_when_made(task: asyncio.Future[ServiceClientLike]) -> None:
    if not task.cancelled() and task.exception() is None:
        release(task.result())
