"""The seam between TinkerBackend and the tinker SDK: the SDK methods it uses, as Protocols.

Tests hand the backend a `TinkerClients` whose clients return real `tinker.types` objects (in
completed futures) without any socket; production uses `SdkClients`, the pinned SDK itself.
Only what the backend calls is here, so an SDK upgrade that changes one of these signatures
fails mypy at `SdkClients`, not at run time.

Every method returns at once with an awaitable (the SDK's `APIFuture`); the work happens on
the SDK's own thread. Creating a client may block on the network the first time (the SDK
opens its session lazily), so the backend calls these methods off its event loop.

That thread is the SDK's, one per process, shared by every client and never stopped by the
SDK: a daemon thread running an event loop (heartbeats, retries, pollers). A daemon thread
still running when the interpreter finalizes is ended by `pthread_exit` the next time it
takes the GIL, which aborts the process (`terminate called without an active exception`)
if a C++ frame is on its stack. So the first SDK client made here registers `stop_sdk_loop`
to run at exit: it closes the clients made here, cancels what still runs on that loop, stops
it and joins the thread while the interpreter is whole.

Each SDK client runs over a "holder" (its connection pools and, for a ServiceClient, the
session's heartbeat). A holder still open when it is collected schedules its own cleanup on
the SDK's loop from `__del__`; once that loop is gone this prints "Exception ignored in
InternalClientHolder.__del__ ... RuntimeError: Event loop is closed", and until then an open
session's heartbeat keeps running (and warns "Session heartbeat failed" once the service is
gone). So every holder made here is closed by its owner: a ServiceClient by the backend's
`close` (or, when the backend is collected unclosed, by `release`), the RestClient's shared
session-less holder at exit, before the loop stops.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import threading
import weakref
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, ParamSpec, Protocol, TypeVar

from ...core.errors import ArthexError, BackendError, InvalidInputError

if TYPE_CHECKING:
    from tinker import types

CloseStatus = Literal["success", "errored", "interrupted"]
P = ParamSpec("P")
T = TypeVar("T")
STOP_TIMEOUT_S = 10.0  # for the SDK's loop to cancel its tasks and its thread to end

logger = logging.getLogger("arthex")
_at_exit_lock = threading.Lock()
_at_exit_registered = False
_SINGLETON = "_internal_client_holder_thread_singleton"
_HOLDER_ATTRIBUTES = ("_session_holder", "_rest_holder", "holder")  # where a client keeps its own
_made: weakref.WeakSet[Any] = weakref.WeakSet()  # SDK clients made here, closed at exit


class TinkerNotFound(BackendError):
    """The service has no such thing (HTTP 404): a checkpoint or run already gone."""


async def submit(
    what: str, method: Callable[P, Awaitable[T]], *args: P.args, **kwargs: P.kwargs
) -> Awaitable[T]:
    """Call an SDK method off the event loop (it may block while the SDK opens its session)
    and return the future it hands back, without waiting for the work. Calls submitted one
    after another on one training client run on the service in that order."""
    try:
        return await asyncio.to_thread(method, *args, **kwargs)
    except Exception as exc:
        raise _translated(what, exc) from exc


async def finish(what: str, future: Awaitable[T], timeout_s: float | None) -> T:
    """Wait for an SDK future; failures and timeouts become arthex errors naming `what`."""
    try:
        return await asyncio.wait_for(_awaited(future), timeout_s)
    except TimeoutError as exc:
        raise BackendError(f"Tinker did not finish {what} within {timeout_s} s") from exc
    except Exception as exc:
        raise _translated(what, exc) from exc


async def call(
    what: str,
    timeout_s: float | None,
    method: Callable[P, Awaitable[T]],
    *args: P.args,
    **kwargs: P.kwargs,
) -> T:
    future = await submit(what, method, *args, **kwargs)
    return await finish(what, future, timeout_s)


async def _awaited(future: Awaitable[T]) -> T:
    return await future


def _translated(what: str, exc: Exception) -> Exception:
    """A request the service rejected as the caller's fault is an InvalidInputError, a missing
    resource a TinkerNotFound, anything else a BackendError."""
    if isinstance(exc, ArthexError):
        return exc
    detail = f"{type(exc).__name__}: {exc}"
    status: Any = getattr(exc, "status_code", None)
    if status == 404:
        return TinkerNotFound(f"Tinker found nothing while {what}: {detail}")
    if getattr(exc, "category", None) == "user" or status in (400, 422):
        return InvalidInputError(f"Tinker rejected {what}: {detail}")
    return BackendError(f"Tinker failed while {what}: {detail}")


class TrainingClientLike(Protocol):
    @property
    def model_id(self) -> str:
        """The training run's id, the first segment of its `tinker://` paths."""
        ...

    def forward_backward(
        self,
        data: list[types.Datum],
        loss_fn: types.LossFnType,
        loss_fn_config: Mapping[str, float | str] | None = None,
    ) -> Awaitable[types.ForwardBackwardOutput]: ...

    def forward_backward_custom(
        self, data: list[types.Datum], loss_fn: Any
    ) -> Awaitable[types.ForwardBackwardOutput]: ...

    def optim_step(
        self, optim_params: types.AdamParams | None = None
    ) -> Awaitable[types.OptimStepResponse]: ...

    def save_state(self, name: str) -> Awaitable[types.SaveWeightsResponse]: ...

    def save_weights_for_sampler(
        self, name: str
    ) -> Awaitable[types.SaveWeightsForSamplerResponse]: ...

    def save_weights_external(
        self, name: str, ttl_seconds: int | None = None
    ) -> Awaitable[types.SaveWeightsExternalResponse]: ...


class SamplingClientLike(Protocol):
    def sample(
        self,
        prompt: types.ModelInput,
        num_samples: int,
        sampling_params: types.SamplingParams,
        include_prompt_logprobs: bool = False,
        topk_prompt_logprobs: int = 0,
        topk_sample_logprobs: int = 0,
    ) -> Awaitable[types.SampleResponse]: ...

    def compute_logprobs(self, prompt: types.ModelInput) -> Awaitable[list[float | None]]: ...


class ServiceClientLike(Protocol):
    def create_lora_training_client(
        self, base_model: str, rank: int = 32, seed: int | None = None
    ) -> Awaitable[TrainingClientLike]: ...

    def create_training_client_from_state_with_optimizer(
        self, path: str
    ) -> Awaitable[TrainingClientLike]: ...

    def create_training_client_from_state(self, path: str) -> Awaitable[TrainingClientLike]: ...

    def create_sampling_client(
        self, model_path: str | None = None, base_model: str | None = None
    ) -> Awaitable[SamplingClientLike]: ...

    def close(self, status: CloseStatus) -> Awaitable[None]: ...


class RestClientLike(Protocol):
    def list_checkpoints(
        self, training_run_id: str
    ) -> Awaitable[types.CheckpointsListResponse]: ...

    def get_training_run(self, training_run_id: str) -> Awaitable[types.TrainingRun]: ...

    def delete_checkpoint_from_tinker_path(self, tinker_path: str) -> Awaitable[None]: ...

    def get_external_weights_urls(
        self, tinker_path: str
    ) -> Awaitable[types.ExternalWeightsUrlsResponse]: ...


class TinkerClients(Protocol):
    """Makes the clients; called once each per backend, off the event loop."""

    def service(self) -> ServiceClientLike: ...

    def rest(self) -> RestClientLike: ...


class SdkClients:
    """The pinned tinker SDK. `base_url`/`api_key` None fall back to the SDK's own lookup
    (`TINKER_BASE_URL`, then production; `TINKER_API_KEY`, then `tinker auth login`)."""

    def __init__(self, base_url: str | None = None, api_key: str | None = None) -> None:
        self.base_url = base_url
        self.api_key = api_key

    def service(self) -> ServiceClientLike:
        import tinker

        _stop_sdk_loop_at_exit()
        client = tinker.ServiceClient(base_url=self.base_url, api_key=self.api_key)
        _made.add(client)
        return client

    def rest(self) -> RestClientLike:
        import tinker

        _stop_sdk_loop_at_exit()
        # Runs over the SDK's process-wide session-less holder for these credentials, shared
        # with every other RestClient on them: it is closed at exit, not by one backend.
        client = tinker.RestClient(base_url=self.base_url, api_key=self.api_key)
        _made.add(client)
        return client


def _holders(client: object) -> list[Any]:
    """The open holders an SDK client keeps (none for a client that is not the SDK's)."""
    found = []
    for name in _HOLDER_ATTRIBUTES:
        holder = vars(client).get(name) if hasattr(client, "__dict__") else None
        closable = holder is not None and callable(getattr(holder, "aclose", None))
        if closable and not getattr(holder, "_closed", True) and holder not in found:
            found.append(holder)
    return found


def release(client: object, wait_s: float | None = None) -> None:
    """Close `client`'s holders on the SDK's loop without telling the service anything: its
    heartbeat stops and its connections close, as when the process ends. For a client whose
    session could not be finished, or whose owner was collected without closing it.
    `wait_s` None does not wait (safe from any thread, the SDK's own included)."""
    _close(_holders(client), wait_s)


def _close(holders: list[Any], wait_s: float | None) -> None:
    running = _sdk_loop()
    if running is None or not holders:
        return

    async def close_all() -> None:
        await asyncio.gather(*(h.aclose() for h in holders), return_exceptions=True)

    try:
        future = asyncio.run_coroutine_threadsafe(close_all(), running[0])
    except RuntimeError:  # the loop is closed: nothing of theirs can run any more
        return
    if wait_s is not None and threading.current_thread() is not running[1]:
        with contextlib.suppress(Exception):
            future.result(wait_s)


def _shared_holders() -> list[Any]:
    """The SDK's process-wide session-less holders (what `RestClient(...)` runs over)."""
    try:
        from tinker.lib import internal_client_holder
    except ImportError:
        return []
    cache: Any = getattr(internal_client_holder, "sessionless_holder_cache", None)
    holders: Any = getattr(cache, "_holders", None)
    if not isinstance(holders, dict):
        return []
    return [h for h in list(holders.values()) if not getattr(h, "_closed", True)]


def _stop_sdk_loop_at_exit() -> None:
    global _at_exit_registered
    with _at_exit_lock:
        if not _at_exit_registered:
            atexit.register(stop_sdk_loop)
            _at_exit_registered = True


def _sdk_loop() -> tuple[asyncio.AbstractEventLoop, threading.Thread] | None:
    """The SDK's loop and its thread, while it runs (the pinned SDK keeps them in a module
    singleton; None too if a later SDK keeps them elsewhere)."""
    try:
        from tinker.lib import internal_client_holder
    except ImportError:
        return None
    singleton: Any = getattr(internal_client_holder, _SINGLETON, None)
    loop = getattr(singleton, "_loop", None)
    thread = getattr(singleton, "_thread", None)
    if not isinstance(loop, asyncio.AbstractEventLoop) or not isinstance(thread, threading.Thread):
        return None
    return (loop, thread) if thread.is_alive() else None


def stop_sdk_loop() -> None:
    """Cancel every task on the SDK's event loop (sessions' heartbeats, pollers, retries),
    stop the loop and join its thread. For interpreter exit: the SDK cannot start the loop
    again, so SDK clients made afterwards in this process would hang."""
    running = _sdk_loop()
    if running is None:
        return
    loop, thread = running
    # Closed by their owners, unless the process ends first; then the shared REST holders.
    _close([h for client in list(_made) for h in _holders(client)], STOP_TIMEOUT_S)
    _close(_shared_holders(), STOP_TIMEOUT_S)

    async def cancel_all() -> None:
        here = asyncio.current_task()
        tasks = [task for task in asyncio.all_tasks() if task is not here]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    with contextlib.suppress(Exception):  # a loop that will not cancel is stopped all the same
        asyncio.run_coroutine_threadsafe(cancel_all(), loop).result(STOP_TIMEOUT_S)
    with contextlib.suppress(RuntimeError):  # already closed
        loop.call_soon_threadsafe(loop.stop)
    thread.join(STOP_TIMEOUT_S)
    if thread.is_alive():
        logger.warning("the tinker SDK's event-loop thread did not stop in %s s", STOP_TIMEOUT_S)


if TYPE_CHECKING:
    import tinker

    _service: type[ServiceClientLike] = tinker.ServiceClient
    _training: type[TrainingClientLike] = tinker.TrainingClient
    _sampling: type[SamplingClientLike] = tinker.SamplingClient
    _rest: type[RestClientLike] = tinker.RestClient
    _clients: type[TinkerClients] = SdkClients
