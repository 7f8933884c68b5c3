"""The seam between TinkerBackend and the tinker SDK: the SDK methods it uses, as Protocols.

Tests hand the backend a `TinkerClients` whose clients return real `tinker.types` objects (in
completed futures) without any socket; production uses `SdkClients`, the pinned SDK itself.
Only what the backend calls is here, so an SDK upgrade that changes one of these signatures
fails mypy at `SdkClients`, not at run time.

Every method returns at once with an awaitable (the SDK's `APIFuture`); the work happens on
the SDK's own thread. Creating a client may block on the network the first time (the SDK
opens its session lazily), so the backend calls these methods off its event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, ParamSpec, Protocol, TypeVar

from ...core.errors import ArthexError, BackendError, InvalidInputError

if TYPE_CHECKING:
    from tinker import types

CloseStatus = Literal["success", "errored", "interrupted"]
P = ParamSpec("P")
T = TypeVar("T")


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

    def optim_step(
        self, optim_params: types.AdamParams | None = None
    ) -> Awaitable[types.OptimStepResponse]: ...

    def save_state(self, name: str) -> Awaitable[types.SaveWeightsResponse]: ...

    def save_weights_for_sampler(
        self, name: str
    ) -> Awaitable[types.SaveWeightsForSamplerResponse]: ...


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

    def create_sampling_client(
        self, model_path: str | None = None, base_model: str | None = None
    ) -> Awaitable[SamplingClientLike]: ...

    def close(self, status: CloseStatus) -> Awaitable[None]: ...


class RestClientLike(Protocol):
    def list_checkpoints(
        self, training_run_id: str
    ) -> Awaitable[types.CheckpointsListResponse]: ...

    def delete_checkpoint_from_tinker_path(self, tinker_path: str) -> Awaitable[None]: ...


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

        return tinker.ServiceClient(base_url=self.base_url, api_key=self.api_key)

    def rest(self) -> RestClientLike:
        import tinker

        return tinker.RestClient(base_url=self.base_url, api_key=self.api_key)


if TYPE_CHECKING:
    import tinker

    _service: type[ServiceClientLike] = tinker.ServiceClient
    _training: type[TrainingClientLike] = tinker.TrainingClient
    _sampling: type[SamplingClientLike] = tinker.SamplingClient
    _rest: type[RestClientLike] = tinker.RestClient
    _clients: type[TinkerClients] = SdkClients
