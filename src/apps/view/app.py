"""The viewer's ASGI app: the read-only JSON API under `/api/`, the page under `/`.

Every route only reads. With a token in force, each request must carry it: `?token=` in the
URL (the page's first load), an `Authorization: Bearer` header (scripts), or the cookie the
first authorised page load sets (the page's own later requests); anything else is 401.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Awaitable, Callable, Sequence
from importlib import resources
from typing import Any

from fastapi import FastAPI, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.middleware.trustedhost import TrustedHostMiddleware

from ...core.errors import ArthexError, InvalidInputError
from . import data

COOKIE = "arthex_view_token"
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]", "::1")


class _Json(JSONResponse):
    """Plain `json.dumps` of what the data layer built (already JSON values): no per-value
    walk by FastAPI's encoder, which costs more than reading the file."""

    def render(self, content: Any) -> bytes:
        return data.encode(content)


STATIC = resources.files("arthex.apps.view") / "static"


def parameter_error(error: RequestValidationError) -> str:
    """One line for the first parameter FastAPI could not convert: `step must be an integer,
    got 'abc'`."""
    problems = list(error.errors())
    if not problems:
        return "a parameter is malformed"
    first = problems[0]
    name = str(first.get("loc", ("", "a parameter"))[-1])
    given = first.get("input")
    if str(first.get("type", "")).startswith("int_"):
        return f"{name} must be an integer, got {given!r}"
    message = str(first.get("msg", "is malformed"))
    return f"{name}: {message[:1].lower()}{message[1:]}, got {given!r}"


def create_app(paths: Sequence[str], token: str | None = None) -> FastAPI:
    """The app over the runs under `paths`; `token`, when given, guards every request."""
    catalog = data.Catalog(paths)
    app = FastAPI(
        title="arthex view",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        default_response_class=_Json,
    )
    app.state.catalog = catalog
    static_dir = str(STATIC)

    if token is None:
        # Without a token only this machine may ask, and only by a loopback name: a page on
        # another site that rebinds its own name to 127.0.0.1 sends its name as Host, refused.
        app.add_middleware(TrustedHostMiddleware, allowed_hosts=list(LOOPBACK_NAMES))
    else:
        if not token:
            raise InvalidInputError("the token must not be empty")
        # Browsers keep cookies per host, not per port: each viewer's cookie has its own
        # name, so two viewers on one host do not overwrite each other's.
        cookie = f"{COOKIE}_{hashlib.sha256(token.encode()).hexdigest()[:12]}"

        @app.middleware("http")
        async def require_token(
            request: Request, call_next: Callable[[Request], Awaitable[Response]]
        ) -> Response:
            given = request.query_params.get("token")
            header = request.headers.get("authorization", "")
            if header.lower().startswith("bearer "):
                given = given or header[7:].strip()
            given = given or request.cookies.get(cookie)
            if given is None or not secrets.compare_digest(given.encode(), token.encode()):
                return JSONResponse({"error": "a valid token is required"}, status_code=401)
            response = await call_next(request)
            if request.query_params.get("token"):
                response.set_cookie(cookie, token, httponly=True, samesite="strict")
            return response

    @app.middleware("http")
    async def headers(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        response = await call_next(request)
        response.headers["Cache-Control"] = "no-store"
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        # Only this server's own scripts and styles: nothing fetched from anywhere else, and
        # no inline script, so text that looks like a script never runs.
        response.headers["Content-Security-Policy"] = (
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
            "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
        )
        return response

    @app.exception_handler(ArthexError)
    async def arthex_error(_request: Request, error: ArthexError) -> JSONResponse:
        status = 404 if isinstance(error, data.NotFound) else 400
        if not isinstance(error, data.NotFound | InvalidInputError):
            status = 500
        text = str(error).splitlines()[0] if str(error) else type(error).__name__
        return JSONResponse({"error": text}, status_code=status)

    @app.exception_handler(RequestValidationError)
    async def bad_parameter(_request: Request, error: RequestValidationError) -> JSONResponse:
        # FastAPI's own answer is a 422 with a list of pydantic's errors: the API promises
        # 400 and one line naming the parameter, as for every other bad parameter.
        return JSONResponse({"error": parameter_error(error)}, status_code=400)

    @app.get("/api/runs")
    def runs(metric: str | None = None, direction: str = "max") -> _Json:
        if direction not in ("max", "min"):
            raise data.BadRequest(f"direction must be max or min, got {direction!r}")
        found = catalog.runs()
        return _Json({"runs": [data.run_summary(catalog, r, metric, direction) for r in found]})

    @app.get("/api/runs/{project}/{name}/history")
    def history(
        project: str, name: str, keys: str | None = None, since: int | None = None
    ) -> Response:
        body = data.history_rows(catalog, catalog.run(project, name), keys, since)
        return Response(body, media_type="application/json")

    @app.get("/api/runs/{project}/{name}/trajectories")
    def trajectories(
        project: str,
        name: str,
        split: str | None = None,
        step: int | None = None,
        offset: int = 0,
        limit: int = Query(20),
        q: str | None = None,
    ) -> _Json:
        run = catalog.run(project, name)
        return _Json(data.trajectories(run, split, step, offset, limit, q or None))

    @app.get("/api/runs/{project}/{name}/checkpoints")
    def checkpoints(
        project: str,
        name: str,
        metric: str | None = None,
        direction: str = "max",
        keep_last: int = 1,
    ) -> _Json:
        run = catalog.run(project, name)
        return _Json(data.checkpoints(catalog, run, metric, direction, keep_last))

    # An editable install links each asset from its own folder into the package: follow them
    # (only the package's own files are there; a URL path still cannot leave the folder).
    app.mount("/static", StaticFiles(directory=static_dir, follow_symlink=True), name="static")

    @app.get("/")
    def page() -> FileResponse:
        return FileResponse(f"{static_dir}/index.html", media_type="text/html")

    return app
