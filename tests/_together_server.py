"""Together's model-upload API on loopback: the endpoints ART 0.5.23's Together deployment
calls (art/utils/deployment/together.py), with the fields its code reads, served over real
HTTP so a client's requests are recorded as they went over the wire.

    GET  /v1/jobs           {"data": [{"job_id", "type", "status", "updated_at",
                                        "args": {"modelName", ...}}, ...]}
    GET  /v1/jobs/{job_id}  {"job_id", "type", "status", "status_updates": [{"status",
                             "message", "timestamp"}, ...], "args": {...}, "created_at",
                             "updated_at"}
    POST /v1/models         {"model_name", "model_source", "model_type", "base_model",
                             "description"} -> {"data": {"job_id", "model_name", "model_id",
                             "model_source"}, "message"}

Like Together, the server fetches `model_source` (the presigned S3 URL) when a job is made and
keeps the bytes it got (`fetched`), and files the model under the account's name
(`{USER}/{model_name}`). Each job walks through the statuses it is given, one per GET of
`/v1/jobs/{id}`, and stays at the last. A request without the account's bearer key gets 401.
"""

from __future__ import annotations

import json
import secrets
import threading
import urllib.request
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import attrs

API_KEY = "together-test-key"
USER = "arthex-tester"
MODEL_FIELDS = ("model_name", "model_source", "model_type", "base_model", "description")


@attrs.define
class Request:
    method: str
    path: str
    authorization: str | None
    content_type: str | None
    body: Any


@attrs.define
class Job:
    job_id: str
    model_name: str  # as Together names it: {USER}/{name}
    statuses: list[tuple[str, str]]  # (status, message) still to come, one per GET
    updates: list[dict[str, str]] = attrs.Factory(list)
    updated_at: datetime = attrs.Factory(lambda: datetime.now(UTC))

    def status(self) -> str:
        return self.updates[-1]["status"] if self.updates else "Queued"

    def advance(self) -> None:
        if self.statuses:
            status, message = self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]
            self.updates.append({"status": status, "message": message, "timestamp": _now()})
            self.updated_at = datetime.now(UTC)

    def summary(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "type": "model_upload",
            "status": self.status(),
            "updated_at": self.updated_at.isoformat(),
            "args": {"modelName": self.model_name, "modelSource": "s3"},
        }


def _now() -> str:
    return datetime.now(UTC).isoformat()


class Together:
    """The server on 127.0.0.1; `base` is what $TOGETHER_BASE_URL takes."""

    def __init__(self, statuses: Sequence[tuple[str, str]] = ()) -> None:
        self.requests: list[Request] = []
        self.jobs: dict[str, Job] = {}
        self.fetched: dict[str, bytes] = {}  # model_name -> the archive Together downloaded
        self.statuses = list(statuses) or [
            ("Queued", "Job queued"),
            ("Running", "Downloading model"),
            ("Complete", "Model upload complete"),
        ]
        self.unavailable = 0  # the next job GETs answered 503, as a busy Together can
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def add_job(
        self, name: str, statuses: Sequence[tuple[str, str]], age: timedelta = timedelta()
    ) -> Job:
        """A job made earlier (by another deployment), already at its first status."""
        job = Job(f"job-{secrets.token_hex(8)}", f"{USER}/{name}", list(statuses))
        job.advance()
        job.updated_at -= age
        self.jobs[job.job_id] = job
        return job

    def reset(self) -> None:
        """Forget every job, request and fetched archive: a fresh account."""
        with self._lock:
            self.requests.clear()
            self.jobs.clear()
            self.fetched.clear()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _answer(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        if path == "/v1/jobs" and method == "GET":
            return 200, {"data": [job.summary() for job in self.jobs.values()]}
        if path.startswith("/v1/jobs/") and method == "GET":
            job = self.jobs.get(path.removeprefix("/v1/jobs/"))
            if job is not None and self.unavailable > 0:
                self.unavailable -= 1
                return 503, {"error": {"message": "service unavailable"}}
            if job is None:
                return 404, {"error": {"message": "job not found"}}
            job.advance()
            return 200, {
                **job.summary(),
                "status_updates": job.updates,
                "created_at": job.updates[0]["timestamp"] if job.updates else _now(),
            }
        if path == "/v1/models" and method == "POST":
            return self._upload(body)
        return 404, {"error": {"message": f"no route {method} {path}"}}

    def _upload(self, body: Any) -> tuple[int, Any]:
        if not isinstance(body, dict) or any(
            not isinstance(body.get(field), str) for field in MODEL_FIELDS
        ):
            return 400, {"error": {"message": f"a model upload needs {MODEL_FIELDS}"}}
        if body["model_type"] not in ("model", "adapter"):
            return 400, {"error": {"message": "model_type is model or adapter"}}
        try:
            with urllib.request.urlopen(body["model_source"], timeout=30) as reply:
                self.fetched[body["model_name"]] = reply.read()
        except OSError as error:
            return 400, {"error": {"message": f"could not fetch model_source: {error}"}}
        job = Job(
            f"job-{secrets.token_hex(8)}", f"{USER}/{body['model_name']}", list(self.statuses)
        )
        self.jobs[job.job_id] = job
        data = {
            "job_id": job.job_id,
            "model_name": job.model_name,
            "model_id": f"model-{secrets.token_hex(8)}",
            "model_source": body["model_source"],
        }
        return 200, {"data": data, "message": "Processing model weights. Job created."}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        together = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _serve(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                with together._lock:
                    together.requests.append(
                        Request(
                            method,
                            self.path,
                            self.headers.get("Authorization"),
                            self.headers.get("Content-Type"),
                            body,
                        )
                    )
                    if self.headers.get("Authorization") != f"Bearer {API_KEY}":
                        status, answer = 401, {"error": {"message": "Invalid API key provided"}}
                    else:
                        status, answer = together._answer(method, self.path, body)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._serve("GET")

            def do_POST(self) -> None:
                self._serve("POST")

        return Handler
