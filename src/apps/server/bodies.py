"""Request bodies on the training server: read once by the Guard, parsed once by the route.

The Guard spools each body (memory up to a threshold, a temp file past it) and leaves it in
the scope under BODY_SCOPE_KEY; a route parses it from there with `json_object`, which reads
the spooled bytes into one buffer and parses that buffer without first decoding it to a
string (pydantic-core's parser), so an accepted body costs its bytes once plus the parsed
value, and nothing is ever held twice.

JSON nested deeper than the parser's limit (about 200 levels) is a 400 with a clear message,
never a RecursionError: deep nesting is the classic way to crash a recursive parser, and the
stdlib one raises RecursionError on 100,000 `[`.
"""

from __future__ import annotations

from typing import Any

from ...adapters.inference.asgi import Scope, SpooledBody
from ...core.errors import InvalidInputError

__all__ = ["BODY_SCOPE_KEY", "MAX_JSON_DEPTH", "BadJsonError", "json_object"]

BODY_SCOPE_KEY = "arthex.body"
MAX_JSON_DEPTH = 200


class BadJsonError(InvalidInputError):
    """The body is not a JSON object (HTTP 400)."""


def spooled(scope: Scope) -> SpooledBody | None:
    body = scope.get(BODY_SCOPE_KEY)
    return body if isinstance(body, SpooledBody) else None


def json_object(scope: Scope) -> dict[str, Any]:
    """The request body as a JSON object; BadJsonError when it is not one."""
    from pydantic_core import from_json

    body = spooled(scope)
    if body is None or body.size == 0:
        raise BadJsonError("the request body is empty; send a JSON object")
    raw = body.read()
    try:
        payload = from_json(raw)
    except ValueError as exc:
        if "recursion limit" in str(exc):
            raise BadJsonError(
                f"the request body is nested more than {MAX_JSON_DEPTH} levels deep"
            ) from None
        raise BadJsonError(f"the request body is not JSON: {exc}") from None
    finally:
        del raw
    if not isinstance(payload, dict):
        raise BadJsonError("the request body must be a JSON object")
    return payload
