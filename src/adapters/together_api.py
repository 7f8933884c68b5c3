"""Together's model-upload API, the three calls ART 0.5.23's Together deployment makes, over
httpx (the `deploy` extra):

    GET  {base}/jobs            {"data": [{"job_id", "updated_at", "args": {"modelName"}, ...}]}
    GET  {base}/jobs/{job_id}   {"status", "status_updates": [{"message"}, ...],
                                 "args": {"modelName"}, "failure_reason"?}
    POST {base}/models          {"model_name", "model_source", "model_type": "adapter",
                                 "base_model", "description"} -> {"data": {"job_id", ...}}

Every request carries `Authorization: Bearer <key>` and `Content-Type: application/json`, as
ART's session does. `base` is https://api.together.xyz/v1 unless $TOGETHER_BASE_URL names
another (the Together SDK's variable). A refused request raises BackendError, one line:
`[HTTP {status}] {METHOD} {url}: {body}`; an answer that is not the JSON object described
above raises CorruptDataError naming what was missing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ..core.errors import BackendError, CorruptDataError, require_extra

DEFAULT_BASE_URL = "https://api.together.xyz/v1"
BASE_URL_ENV = "TOGETHER_BASE_URL"
TIMEOUT_S = 60.0
_BODY_CHARS = 500


def base_url() -> str:
    """$TOGETHER_BASE_URL, else Together's own API."""
    return (os.environ.get(BASE_URL_ENV) or DEFAULT_BASE_URL).rstrip("/")


class TogetherUnavailable(BackendError):
    """Together did not answer, or answered 429 or 5xx: a request that may work if repeated."""


class TogetherApi:
    """An open client of Together's API; `async with TogetherApi(key) as api:`."""

    def __init__(self, api_key: str, base: str | None = None) -> None:
        require_extra("deploy", "httpx")
        import httpx

        self.base = (base or base_url()).rstrip("/")
        self._client = httpx.AsyncClient(
            headers={"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"},
            timeout=TIMEOUT_S,
        )

    async def __aenter__(self) -> TogetherApi:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._client.aclose()

    async def list_jobs(self) -> list[Mapping[str, Any]]:
        """Every model-upload job of the account."""
        answer = await self._call("GET", "/jobs")
        jobs = answer.get("data")
        if not isinstance(jobs, list) or not all(isinstance(job, dict) for job in jobs):
            raise CorruptDataError(f"GET {self.base}/jobs answered without a 'data' list of jobs")
        return jobs

    async def get_job(self, job_id: str) -> Mapping[str, Any]:
        """One job: its status, status updates and arguments."""
        return await self._call("GET", f"/jobs/{job_id}")

    async def upload_model(self, body: Mapping[str, Any]) -> Mapping[str, Any]:
        """Start a model-upload job; Together fetches `model_source` itself."""
        return await self._call("POST", "/models", body)

    async def _call(
        self, method: str, path: str, body: Mapping[str, Any] | None = None
    ) -> Mapping[str, Any]:
        import httpx

        url = f"{self.base}{path}"
        try:
            response = await self._client.request(method, url, json=body)
        except httpx.HTTPError as error:
            raise TogetherUnavailable(f"{method} {url} failed: {error!r}") from error
        if response.status_code >= 400:
            text = " ".join(response.text.split())[:_BODY_CHARS]
            busy = response.status_code == 429 or response.status_code >= 500
            error_type = TogetherUnavailable if busy else BackendError
            raise error_type(f"[HTTP {response.status_code}] {method} {url}: {text}")
        try:
            answer = response.json()
        except ValueError as error:
            raise CorruptDataError(f"{method} {url} answered with no JSON: {error}") from error
        if not isinstance(answer, dict):
            raise CorruptDataError(
                f"{method} {url} answered {type(answer).__name__}, not an object"
            )
        return answer
