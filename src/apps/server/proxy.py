"""The OpenAI-compatible proxy: a tenant's `name@step` becomes the backend's served name.

The backend serves each model under its server-side id (`m…@step`); the proxy rewrites the
`model` field on the way in and the id back to the tenant's name on the way out, so a tenant
never sees ids of another's models and rollout code sees the names it asked for. Streaming
responses (`text/event-stream`) are relayed line by line with the same rewrite.

The backend's inference server is shared by every tenant, and its errors may list every
name it serves (its 404 for an unknown name does). An upstream error therefore never reaches
the tenant as is: a 404 becomes the proxy's own message, which names only what the tenant
asked for, and any other error keeps its message only when, after the tenant's own id is
renamed, no other model id is left in it. Successful bodies are the tenant's own completions:
only its id is renamed (hiding every id-shaped string would also rewrite generated text).
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from ...adapters.serverless import wire
from ...core.errors import BackendError
from .registry import ModelRecord
from .service import TrainingService

if TYPE_CHECKING:
    import httpx
    from starlette.responses import Response

    from ...ports.training_backend import InferenceEndpoint

UPSTREAM_TIMEOUT_S = 1200.0


_ANY_MODEL_ID = re.compile(r"m[0-9a-f]{24}")


def _rename(text: str, record: ModelRecord) -> str:
    return text.replace(record.id, record.name)


def _upstream_error(status: int, content: bytes, record: ModelRecord, requested: str) -> Response:
    """An error of the shared inference server, as the tenant may see it."""
    from starlette.responses import JSONResponse

    try:
        payload: Any = json.loads(content)
    except ValueError:
        payload = None
    message, kind, param = wire.error_message(payload)
    own = _rename(message, record)
    if status == 404:
        message = (
            f"model {requested!r} is not served right now; GET /v1/models lists the names "
            "(and steps) this key can use"
        )
    elif not own or _ANY_MODEL_ID.search(own) is not None:
        message = f"the backend's inference server refused the request (HTTP {status})"
    else:
        message = own
    kind = kind or (wire.NOT_FOUND if status == 404 else wire.INVALID_REQUEST)
    return JSONResponse(wire.error_body(status, message, kind, param), status_code=status)


async def open_upstream(
    http: httpx.AsyncClient, endpoint: InferenceEndpoint, path: str, body: Any
) -> httpx.Response:
    """POST `body` to `path` of a backend's inference server, its response streamed (the
    caller reads or relays it, and closes it); unreachable is a BackendError."""
    import httpx

    request = http.build_request(
        "POST",
        endpoint.base_url.rstrip("/") + path,
        json=body,
        headers={"Authorization": f"Bearer {endpoint.api_key}"},
        timeout=UPSTREAM_TIMEOUT_S,
    )
    try:
        return await http.send(request, stream=True)
    except httpx.TransportError as exc:
        raise BackendError(f"the backend's inference server is unreachable: {exc}") from exc


def streamed(
    upstream: httpx.Response, rewrite: Callable[[str], str] | None = None
) -> Response | None:
    """The upstream's event stream relayed to the client (each line rewritten when `rewrite`
    is given, else the bytes as they come), closed when done; None when the upstream answered
    otherwise (an error, or a whole body: `read_body`)."""
    from starlette.background import BackgroundTask
    from starlette.responses import StreamingResponse

    content_type = upstream.headers.get("content-type", "application/json")
    if not (upstream.is_success and content_type.startswith("text/event-stream")):
        return None
    if rewrite is None:
        chunks: AsyncIterator[bytes] = upstream.aiter_raw()
    else:

        async def rewritten() -> AsyncIterator[bytes]:
            async for line in upstream.aiter_lines():
                yield (rewrite(line) + "\n").encode()

        chunks = rewritten()
    return StreamingResponse(
        chunks,
        status_code=upstream.status_code,
        media_type="text/event-stream",
        background=BackgroundTask(upstream.aclose),
    )


async def read_body(upstream: httpx.Response) -> bytes:
    """The upstream's whole body; the response is closed either way."""
    try:
        return await upstream.aread()
    finally:
        await upstream.aclose()


async def chat_completions(
    service: TrainingService,
    http: httpx.AsyncClient,
    tenant: str,
    body: dict[str, Any],
    project: str | None,
) -> Response:
    from starlette.responses import Response

    requested = body.get("model")
    record, endpoint, served = await service.resolve_served(tenant, requested, project)
    body["model"] = served
    upstream = await open_upstream(http, endpoint, "/chat/completions", body)
    stream = streamed(upstream, lambda line: _rename(line, record))
    if stream is not None:
        return stream
    content = await read_body(upstream)
    content_type = upstream.headers.get("content-type", "application/json")
    if not upstream.is_success:
        return _upstream_error(upstream.status_code, content, record, str(requested))
    text = _rename(content.decode("utf-8", errors="replace"), record)
    try:
        payload: Any = json.loads(text)
    except ValueError:
        return Response(text, status_code=upstream.status_code, media_type=content_type)
    if isinstance(payload, dict) and "model" in payload:
        payload["model"] = requested
    return Response(
        json.dumps(payload), status_code=upstream.status_code, media_type="application/json"
    )


async def list_models(
    service: TrainingService, http: httpx.AsyncClient, tenant: str, project: str | None
) -> dict[str, Any]:
    """The tenant's served names, asked of each backend endpoint once."""
    import httpx

    records = service.served_records(tenant, project)
    names: dict[str, int] = {}
    for record in service.registry.of_tenant(tenant):
        names[record.name] = names.get(record.name, 0) + 1
    by_endpoint: dict[tuple[str, str], list[ModelRecord]] = {}
    for record in records:
        endpoint = service.endpoint_of(record)
        if endpoint is not None:
            by_endpoint.setdefault((endpoint.base_url, endpoint.api_key), []).append(record)
    data: list[dict[str, Any]] = []
    for (base_url, api_key), group in by_endpoint.items():
        try:
            response = await http.get(
                base_url.rstrip("/") + "/models",
                headers={"Authorization": f"Bearer {api_key}"},
                timeout=30.0,
            )
            response.raise_for_status()
            served = [str(item["id"]) for item in response.json().get("data", [])]
        except (httpx.HTTPError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise BackendError(
                f"the backend's inference server did not list models: {exc}"
            ) from exc
        for record in group:
            qualified = project is None and names.get(record.name, 0) > 1
            public = f"{record.project}/{record.name}" if qualified else record.name
            for name in served:
                base, at, step = name.partition("@")
                if base == record.id:
                    number = int(step) if at and step.isdigit() else None
                    artifact = wire.artifact_name(tenant, record.project, record.name, number)
                    for shown in (public + (f"@{step}" if at else ""), artifact):
                        data.append(
                            {
                                "id": shown,
                                "object": "model",
                                "owned_by": "arthex",
                                "project": record.project,
                            }
                        )
    data.sort(key=lambda item: item["id"])
    return {"object": "list", "data": data}
