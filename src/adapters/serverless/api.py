"""The hosted serverless training API as resources: `Client().models`, `.models.checkpoints`,
`.training_jobs`, `.training_jobs.events` and `.sft_training_jobs`, one async method per route.

    client = Client(base_url="http://gpu-box:8000/v1", api_key="ak-...")
    model = await client.models.create(project="p", name="agent", base_model="Qwen/...")
    job = await client.training_jobs.create(model_id=model.id, trajectory_groups=groups)
    async for event in client.training_jobs.events.list(training_job_id=job.id):
        ...

Its shape is ART 0.5.23's `art.serverless.client.Client` (the same resources, methods, keyword
arguments, request bodies and answers), so `arthex serve` and the hosted service serve it, and
code written against ART's client runs on it. Requests go through the `ServerlessTransport`
that `ServerlessBackend` uses too (transport.py): the same retries (a POST only when refused
unread), and an error answer raises arthex's error for it (`NotRegisteredError` for 404,
`InvalidInputError` for 400/413/422, `ModelBusyError` for 409, `ServerlessAuthError` for 401,
`QuotaExceededError`, else `BackendError`), not openai's `APIStatusError` classes.

A listing (`checkpoints.list`, `events.list`) is awaitable, giving its first page, and async
iterable, giving every item of every page: the next page is asked for after the last item's
`id`, while the server says it has more.
"""

from __future__ import annotations

import functools
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Generic, Literal, Protocol, TypeVar

import pydantic

from ...core.errors import BackendError, InvalidInputError
from ...core.trajectories import TrajectoryGroup
from . import wire
from .api_types import (
    Checkpoint,
    DeleteCheckpointsResponse,
    ExperimentalTrainingConfig,
    Model,
    SFTTrainingConfig,
    SFTTrainingJob,
    TrainingJob,
    TrainingJobEvent,
)
from .transport import ServerlessTransport, server_of

if TYPE_CHECKING:
    import httpx

__all__ = [
    "Checkpoints",
    "Client",
    "CursorListing",
    "CursorPage",
    "Models",
    "SFTTrainingJobs",
    "TrainingJobEvents",
    "TrainingJobs",
]

# An id the server gave, as one URL path segment: nothing that could name another route.
_PATH_ID = re.compile(r"[A-Za-z0-9_~-][A-Za-z0-9._~:-]{0,199}")


class _HasId(Protocol):
    @property
    def id(self) -> str: ...


ItemT = TypeVar("ItemT", bound=_HasId)
AnswerT = TypeVar("AnswerT", bound=pydantic.BaseModel)


def _path_id(value: object, what: str) -> str:
    if not isinstance(value, str) or _PATH_ID.fullmatch(value) is None:
        raise InvalidInputError(
            f"{what} must be an id the server gave (letters, digits and . _ ~ : -, not starting "
            f"with '.'), got {value!r:.80}"
        )
    return value


def _given(value: object) -> bool:
    """Whether a listing option was given: None and openai's NOT_GIVEN (falsy, and what ART's
    callers pass for "not given") are not; a limit of 0 is, and is refused."""
    return value is not None and (bool(value) or isinstance(value, int))


def _query(after: object, limit: object, order: object = None) -> dict[str, str]:
    query: dict[str, str] = {}
    if _given(after):
        if not isinstance(after, str):
            raise InvalidInputError(f"after must be an item's id, got {after!r:.80}")
        query["after"] = after
    if _given(limit):
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise InvalidInputError(f"limit must be an integer >= 1, got {limit!r:.40}")
        query["limit"] = str(limit)
    if _given(order):
        if order not in ("asc", "desc"):
            raise InvalidInputError(f"order must be 'asc' or 'desc', got {order!r:.40}")
        query["order"] = str(order)
    return query


def _parse(kind: type[AnswerT], payload: object, what: str) -> AnswerT:
    try:
        return kind.model_validate(payload)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the body"
        raise BackendError(
            f"{what}: the server's answer is not a {kind.__name__} ({where}: {first['msg']})"
        ) from None


def _groups_json(groups: Sequence[TrajectoryGroup]) -> list[dict[str, Any]]:
    """Groups as the hosted API takes them, ART's dump: a group's and a trajectory's fields at
    their defaults left out, the messages and choices inside whole."""
    dumped = []
    for group in groups:
        body = _compact(group)
        body["trajectories"] = [_compact(t) for t in group.trajectories]
        dumped.append(body)
    return dumped


def _compact(model: pydantic.BaseModel) -> dict[str, Any]:
    dumped = model.model_dump(mode="json")
    for name, field in type(model).model_fields.items():
        if name in dumped and getattr(model, name) == field.get_default(call_default_factory=True):
            del dumped[name]
    return dumped


class CursorPage(Generic[ItemT]):
    """One page of a listing: its items (`data`), and whether the server has more after them
    (`has_more`). Async iteration gives this page's items and every later page's."""

    def __init__(
        self,
        data: list[ItemT],
        has_more: bool | None,
        fetch: Callable[[dict[str, str]], Awaitable[CursorPage[ItemT]]],
        query: dict[str, str],
    ) -> None:
        self.data = data
        self.has_more = has_more
        self._fetch = fetch
        self._query = query

    def has_next_page(self) -> bool:
        return self.has_more is not False and bool(self.data)

    async def get_next_page(self) -> CursorPage[ItemT]:
        if not self.has_next_page():
            raise InvalidInputError(
                "this is the listing's last page: check has_next_page() before get_next_page()"
            )
        return await self._fetch({**self._query, "after": self.data[-1].id})

    async def iter_pages(self) -> AsyncIterator[CursorPage[ItemT]]:
        page = self
        while True:
            yield page
            if not page.has_next_page():
                return
            page = await page.get_next_page()

    async def __aiter__(self) -> AsyncIterator[ItemT]:
        async for page in self.iter_pages():
            for item in page.data:
                yield item


class CursorListing(Generic[ItemT]):
    """What `list` returns: await it for the first page, or iterate it for every item. Each
    await or iteration asks the server afresh."""

    def __init__(
        self, fetch: Callable[[dict[str, str]], Awaitable[CursorPage[ItemT]]], query: dict[str, str]
    ) -> None:
        self._fetch = fetch
        self._query = query

    def __await__(self) -> Generator[Any, None, CursorPage[ItemT]]:
        return self._fetch(dict(self._query)).__await__()

    async def __aiter__(self) -> AsyncIterator[ItemT]:
        async for item in await self:
            yield item


def _listing(
    http: ServerlessTransport, path: str, kind: type[Any], query: dict[str, str]
) -> CursorListing[Any]:
    async def fetch(asked: dict[str, str]) -> CursorPage[Any]:
        payload = (await http.request("GET", path, params=asked)).json()
        if not isinstance(payload, dict) or not isinstance(payload.get("data"), list):
            raise BackendError(f"GET {path}: the server's answer is not a list page")
        items = [_parse(kind, item, f"GET {path}") for item in payload["data"]]
        has_more = payload.get("has_more")
        return CursorPage(items, has_more if isinstance(has_more, bool) else None, fetch, asked)

    return CursorListing(fetch, query)


class _Resource:
    def __init__(self, client: Client) -> None:
        self._client = client
        self._http = client.http


class Models(_Resource):
    async def create(
        self,
        *,
        entity: str | None = None,
        project: str | None = None,
        name: str | None = None,
        base_model: str,
        return_existing: bool = False,
    ) -> Model:
        """Register a model (`entity` None: the key's own); with `return_existing`, the one
        already registered under this project and name is the answer."""
        body = {
            "entity": entity,
            "project": project,
            "name": name,
            "base_model": base_model,
            "return_existing": return_existing,
        }
        response = await self._http.request("POST", wire.MODELS_PATH, json=body)
        return _parse(Model, response.json(), f"POST {wire.MODELS_PATH}")

    async def log(
        self, *, model_id: str, trajectory_groups: Sequence[TrajectoryGroup], split: str
    ) -> None:
        """Keep `trajectory_groups` with the model on the server, under `split`."""
        path = f"{wire.MODELS_PATH}/{_path_id(model_id, 'model_id')}/log"
        body = {"model_id": model_id, "trajectory_groups": _groups_json(trajectory_groups),
                "split": split}  # fmt: skip
        await self._http.request("POST", path, json=body)

    async def delete(self, *, model_id: str) -> None:
        """Delete the model, its checkpoints and what was logged with it."""
        await self._http.request("DELETE", f"{wire.MODELS_PATH}/{_path_id(model_id, 'model_id')}")

    @functools.cached_property
    def checkpoints(self) -> Checkpoints:
        return Checkpoints(self._client)


class Checkpoints(_Resource):
    def list(
        self,
        *,
        after: str | None = None,
        limit: int | None = None,
        model_id: str,
        order: Literal["asc", "desc"] | None = None,
    ) -> CursorListing[Checkpoint]:
        """The model's checkpoints by step (`order`, ascending unless said), `limit` a page,
        starting after the checkpoint id `after`."""
        path = f"{wire.MODELS_PATH}/{_path_id(model_id, 'model_id')}/checkpoints"
        listing: CursorListing[Checkpoint] = _listing(
            self._http, path, Checkpoint, _query(after, limit, order)
        )
        return listing

    async def delete(self, *, model_id: str, steps: Iterable[int]) -> DeleteCheckpointsResponse:
        """Delete the model's checkpoints of `steps`; the answer counts them and names the
        steps that had none."""
        path = f"{wire.MODELS_PATH}/{_path_id(model_id, 'model_id')}/checkpoints"
        response = await self._http.request("DELETE", path, json={"steps": list(steps)})
        return _parse(DeleteCheckpointsResponse, response.json(), f"DELETE {path}")


class TrainingJobs(_Resource):
    async def create(
        self,
        *,
        model_id: str,
        trajectory_groups: Sequence[TrajectoryGroup],
        experimental_config: ExperimentalTrainingConfig | None = None,
    ) -> TrainingJob:
        """Start training the model on the groups (never retried: the server may have
        started it); follow it with `events.list`."""
        body = {
            "model_id": model_id,
            "trajectory_groups": _groups_json(trajectory_groups),
            "experimental_config": experimental_config,
        }
        response = await self._http.request("POST", wire.JOBS_PATH, json=body)
        return _parse(TrainingJob, response.json(), f"POST {wire.JOBS_PATH}")

    @functools.cached_property
    def events(self) -> TrainingJobEvents:
        return TrainingJobEvents(self._client)


class TrainingJobEvents(_Resource):
    def list(
        self, *, training_job_id: str, after: str | None = None, limit: int | None = None
    ) -> CursorListing[TrainingJobEvent]:
        """The job's events so far, after the event id `after`; a job's events end with
        `training_ended` or `training_failed`."""
        job = _path_id(training_job_id, "training_job_id")
        path = f"{wire.JOBS_PATH}/{job}/events"
        listing: CursorListing[TrainingJobEvent] = _listing(
            self._http, path, TrainingJobEvent, _query(after, limit)
        )
        return listing


class SFTTrainingJobs(_Resource):
    async def create(
        self, *, model_id: str, training_data_url: str, config: SFTTrainingConfig | None = None
    ) -> SFTTrainingJob:
        """Start fine-tuning on the records at `training_data_url` (a URL the server can
        read: `arthex serve` reads none, `ServerlessBackend.train_sft` sends the records)."""
        body = {"model_id": model_id, "training_data_url": training_data_url, "config": config}
        response = await self._http.request("POST", wire.SFT_JOBS_PATH, json=body)
        return _parse(SFTTrainingJob, response.json(), f"POST {wire.SFT_JOBS_PATH}")

    @functools.cached_property
    def events(self) -> TrainingJobEvents:
        return TrainingJobEvents(self._client)


class Client:
    """The hosted API's client. `base_url` and `api_key` come from the arguments, else from
    `ARTHEX_SERVERLESS_URL` and `ARTHEX_API_KEY` (then `WANDB_API_KEY`); with no URL at all
    it is the hosted service's. `timeout` is per request, `max_retries` how often a GET or
    DELETE is retried, `transport` an httpx transport for custom networking."""

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 3,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        url, key = server_of(base_url, api_key, "Client")
        self.api_key = key
        self.http = ServerlessTransport(
            url, key, timeout=timeout, retries=max_retries, transport=transport
        )

    @property
    def base_url(self) -> str:
        """The API's base URL, ending in `/v1/`."""
        return self.http.base_url + "/"

    @functools.cached_property
    def models(self) -> Models:
        return Models(self)

    @functools.cached_property
    def training_jobs(self) -> TrainingJobs:
        return TrainingJobs(self)

    @functools.cached_property
    def sft_training_jobs(self) -> SFTTrainingJobs:
        return SFTTrainingJobs(self)

    async def close(self) -> None:
        await self.http.aclose()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
