"""The OpenAI-compatible proxy: a tenant's `name@step` becomes the backend's served name.

The backend serves each model under its server-side id (`m…@step`); the proxy rewrites the
`model` field on the way in and the id back to the tenant's name on the way out, so a tenant
never sees ids of another's models and rollout code sees the names it asked for. Streaming
responses (`text/event-stream`) are relayed line by line with the same rewrite.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from ...core.errors import BackendError, InvalidInputError
from .registry import ModelRecord
from .service import TrainingService

if TYPE_CHECKING:
    import httpx
    from starlette.responses import Response

UPSTREAM_TIMEOUT_S = 1200.0


def _rename(text: str, record: ModelRecord) -> str:
    return text.replace(record.id, record.name)


async def chat_completions(
    service: TrainingService,
    http: httpx.AsyncClient,
    tenant: str,
    raw: bytes,
    project: str | None,
) -> Response:
    import httpx
    from starlette.background import BackgroundTask
    from starlette.responses import Response, StreamingResponse

    try:
        body = json.loads(raw or b"null")
    except ValueError as exc:
        raise InvalidInputError(f"the request body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise InvalidInputError("the request body must be a JSON object")
    requested = body.get("model")
    record, endpoint, served = await service.resolve_served(tenant, requested, project)
    body["model"] = served
    request = http.build_request(
        "POST",
        endpoint.base_url.rstrip("/") + "/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {endpoint.api_key}"},
        timeout=UPSTREAM_TIMEOUT_S,
    )
    try:
        upstream = await http.send(request, stream=True)
    except httpx.TransportError as exc:
        raise BackendError(f"the backend's inference server is unreachable: {exc}") from exc
    content_type = upstream.headers.get("content-type", "application/json")
    if content_type.startswith("text/event-stream"):

        async def relay() -> AsyncIterator[bytes]:
            async for line in upstream.aiter_lines():
                yield (_rename(line, record) + "\n").encode()

        return StreamingResponse(
            relay(),
            status_code=upstream.status_code,
            media_type="text/event-stream",
            background=BackgroundTask(upstream.aclose),
        )
    try:
        content = await upstream.aread()
    finally:
        await upstream.aclose()
    text = _rename(content.decode("utf-8", errors="replace"), record)
    try:
        payload: Any = json.loads(text)
    except ValueError:
        return Response(text, status_code=upstream.status_code, media_type=content_type)
    if isinstance(payload, dict) and "model" in payload and upstream.is_success:
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
                    data.append(
                        {
                            "id": public + (f"@{step}" if at else ""),
                            "object": "model",
                            "owned_by": "arthex",
                            "project": record.project,
                        }
                    )
    data.sort(key=lambda item: item["id"])
    return {"object": "list", "data": data}
