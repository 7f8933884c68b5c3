"""The OpenAI chat-completions wire shape: the request we accept, the response we build.

Pure functions over an engine; no web framework here, so the shapes are testable on their own.
"""

from __future__ import annotations

import json
import math
import re
import secrets
import time
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ...core.errors import InvalidInputError
from .chat import first_stop
from .engine import MAX_TOP_LOGPROBS, Sample, SamplingEngine, SamplingParams

MAX_N = 128
# JSON has no -inf; vLLM reports impossible tokens with this floor too.
LOGPROB_FLOOR = -9999.0
_TOOL_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.DOTALL)


class ChatMessage(BaseModel):
    """One message; fields beyond role and content (tool_calls, tool_call_id, name) pass
    through to the chat template untouched."""

    model_config = ConfigDict(extra="allow", strict=True)

    role: str = Field(min_length=1)
    content: str | list[dict[str, Any]] | None = None


class ChatCompletionRequest(BaseModel):
    """The subset of the OpenAI request we honour. Unknown fields are accepted and ignored,
    as OpenAI clients send some by default; options that would change the output and that
    we cannot honour are rejected instead (see `unsupported`).

    Logprobs and token ids come back unless the request says `logprobs: false` (or
    `return_token_ids: false`, vLLM's switch): rollout code written for ART never asks for
    them, and a choice without them cannot be trained."""

    model_config = ConfigDict(extra="allow", strict=True)

    model: str = Field(min_length=1)
    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    n: int = Field(default=1, ge=1, le=MAX_N)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    seed: int | None = None
    stop: str | list[str] | None = None
    logprobs: bool | None = None
    return_token_ids: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)
    stream: bool | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None

    def unsupported(self) -> str | None:
        if self.stream:
            return "stream=true is not supported; request the whole completion"
        for name in ("frequency_penalty", "presence_penalty"):
            value = getattr(self, name)
            if value not in (None, 0, 0.0):
                return f"{name} is not supported (got {value}); leave it unset or 0"
        if self.top_logprobs and not self.wants_logprobs:
            return "top_logprobs needs logprobs (leave it unset or true), got logprobs=false"
        if isinstance(self.stop, list) and any(not stop for stop in self.stop):
            return "stop strings must not be empty"
        return None

    @property
    def wants_logprobs(self) -> bool:
        return self.logprobs is not False

    @property
    def wants_token_ids(self) -> bool:
        return self.return_token_ids is not False

    def sampling_params(self, default_max_tokens: int) -> SamplingParams:
        stop: tuple[str, ...]
        if self.stop is None or self.stop == "":
            stop = ()
        elif isinstance(self.stop, str):
            stop = (self.stop,)
        else:
            stop = tuple(self.stop)
        return SamplingParams(
            max_tokens=self.max_completion_tokens or self.max_tokens or default_max_tokens,
            temperature=1.0 if self.temperature is None else self.temperature,
            top_p=1.0 if self.top_p is None else self.top_p,
            seed=self.seed,
            stop=stop,
            top_logprobs=self.top_logprobs or 0,
        )


def parse_request(body: bytes) -> ChatCompletionRequest:
    """Bytes to a validated request, or InvalidInputError with a message a person can act on."""
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidInputError(f"the request body is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise InvalidInputError("the request body must be a JSON object")
    try:
        request = ChatCompletionRequest.model_validate(data)
    except ValidationError as exc:
        raise InvalidInputError(
            f"invalid chat completion request: {validation_problems(exc)}"
        ) from exc
    problem = request.unsupported()
    if problem:
        raise InvalidInputError(problem)
    return request


def validation_problems(exc: ValidationError, at_most: int = 10) -> str:
    """pydantic's complaints in one line: `where: what` for each (the first `at_most`)."""
    return "; ".join(
        f"{'.'.join(str(part) for part in error['loc']) or 'body'}: {error['msg']}"
        for error in exc.errors(include_url=False)[:at_most]
    )


ERROR_KINDS = {
    400: "BadRequestError",
    401: "AuthenticationError",
    403: "PermissionDeniedError",
    404: "NotFoundError",
    405: "MethodNotAllowed",
    413: "RequestTooLarge",
    429: "RateLimitError",
}


def error_kind(status: int, default: str = "APIError") -> str:
    """The `type` of an OpenAI-shaped error body for an HTTP status."""
    return ERROR_KINDS.get(status, default)


def build_response(
    engine: SamplingEngine,
    request: ChatCompletionRequest,
    prompt_token_ids: list[int],
    samples: Sequence[Sample],
    params: SamplingParams,
) -> dict[str, Any]:
    """The ChatCompletion JSON. Every choice carries `prompt_token_ids` and `token_ids` (as
    vLLM does with return_token_ids) so training never re-tokenizes, and `logprobs.content`
    with tokens spelled `token_id:{id}`; a request can turn either off (see the request)."""
    spell = _Speller(engine, request.model)
    choices = [
        _choice(engine, request, index, prompt_token_ids, sample, params, spell)
        for index, sample in enumerate(samples)
    ]
    completion_tokens = sum(len(sample.token_ids) for sample in samples)
    return {
        "id": f"chatcmpl-{secrets.token_hex(12)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.model,
        "choices": choices,
        **({"prompt_token_ids": prompt_token_ids} if request.wants_token_ids else {}),
        "usage": {
            "prompt_tokens": len(prompt_token_ids),
            "completion_tokens": completion_tokens,
            "total_tokens": len(prompt_token_ids) + completion_tokens,
        },
    }


def _choice(
    engine: SamplingEngine,
    request: ChatCompletionRequest,
    index: int,
    prompt_token_ids: list[int],
    sample: Sample,
    params: SamplingParams,
    spell: _Speller,
) -> dict[str, Any]:
    text = engine.decode(request.model, sample.token_ids)
    if sample.finish_reason == "stop" and params.stop:
        cut = first_stop(text, params.stop)
        if cut is not None:
            text = text[:cut]
    message: dict[str, Any] = {"role": "assistant", "content": text}
    finish_reason: str = sample.finish_reason
    if request.tools:
        content, tool_calls = parse_tool_calls(text)
        if tool_calls:
            message = {"role": "assistant", "content": content, "tool_calls": tool_calls}
            if finish_reason == "stop":
                finish_reason = "tool_calls"
    logprobs = None
    if request.wants_logprobs:
        logprobs = {
            "content": [
                {
                    **spell(token),
                    "logprob": _finite(logprob),
                    "top_logprobs": [
                        {**spell(other), "logprob": _finite(other_logprob)}
                        for other, other_logprob in top
                    ],
                }
                for token, logprob, top in zip(
                    sample.token_ids, sample.logprobs, sample.top_logprobs
                )
            ],
            "refusal": None,
        }
    choice: dict[str, Any] = {
        "index": index,
        "message": message,
        "logprobs": logprobs,
        "finish_reason": finish_reason,
    }
    if request.wants_token_ids:
        choice["prompt_token_ids"] = prompt_token_ids
        choice["token_ids"] = list(sample.token_ids)
    return choice


class _Speller:
    """`token` and `bytes` of a token's logprob entry, looked up once per token id in a
    response (a response spells every token, and its top alternatives repeat a lot)."""

    def __init__(self, engine: SamplingEngine, model: str) -> None:
        self._engine = engine
        self._model = model
        self._known: dict[int, dict[str, Any]] = {}

    def __call__(self, token: int) -> dict[str, Any]:
        entry = self._known.get(token)
        if entry is None:
            text = self._engine.token_text(self._model, token)
            entry = {"token": f"token_id:{token}", "bytes": list(text.encode("utf-8"))}
            self._known[token] = entry
        return entry


def _finite(value: float) -> float:
    return value if math.isfinite(value) else LOGPROB_FLOOR


def parse_tool_calls(text: str) -> tuple[str | None, list[dict[str, Any]]]:
    """Hermes-style `<tool_call>{"name": ..., "arguments": ...}</tool_call>` blocks to
    OpenAI tool calls. A block that is not valid JSON with a name stays in the content."""
    calls: list[dict[str, Any]] = []

    def take(match: re.Match[str]) -> str:
        try:
            payload = json.loads(match.group(1))
        except json.JSONDecodeError:
            return match.group(0)
        if not isinstance(payload, dict) or not isinstance(payload.get("name"), str):
            return match.group(0)
        arguments = payload.get("arguments", {})
        calls.append(
            {
                "id": f"call_{secrets.token_hex(12)}",
                "type": "function",
                "function": {
                    "name": payload["name"],
                    "arguments": arguments
                    if isinstance(arguments, str)
                    else json.dumps(arguments, ensure_ascii=False),
                },
            }
        )
        return ""

    remaining = _TOOL_CALL.sub(take, text)
    if not calls:
        return text, []
    return (remaining.strip() or None), calls


def error_body(message: str, kind: str, status: int, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}
