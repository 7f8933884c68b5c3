"""The one table between errors and HTTP answers: what the server answers an error with, the
client reads back as the same error, and the statuses a foreign server sends read as ART's."""

from __future__ import annotations

import pytest

from arthex.adapters.serverless import wire
from arthex.adapters.serverless.errors import (
    ModelBusyError,
    QuotaExceededError,
    ServerlessAuthError,
    error_for,
    http_answer,
)
from arthex.core.errors import (
    BackendError,
    InvalidInputError,
    NotRegisteredError,
    RunBusyError,
    UnsupportedCapability,
)

SENT = [
    ModelBusyError("a job of m1 is running"),
    RunBusyError("m1 is being trained by client 7"),
    NotRegisteredError("no model m1"),
    UnsupportedCapability("export", "TinkerBackend"),
    InvalidInputError("reward is NaN"),
    QuotaExceededError("3 models of 3", 429),
    QuotaExceededError("disk full", 507),
]


@pytest.mark.parametrize("sent", SENT, ids=lambda e: type(e).__name__)
def test_an_error_the_server_answers_with_reads_back_as_the_same_error(sent: Exception) -> None:
    answer = http_answer(sent)
    assert answer is not None
    status, kind, param = answer
    body = wire.error_body(status, str(sent), kind, param)
    message, read_kind, read_param = wire.error_message(body)
    received = error_for(status, read_kind, message, read_param)
    assert type(received) is type(sent)
    assert str(sent) in str(received)
    if isinstance(sent, QuotaExceededError):
        assert isinstance(received, QuotaExceededError)
        assert received.status == sent.status


def test_the_statuses_are_the_documented_ones() -> None:
    assert http_answer(ModelBusyError("x")) == (409, wire.MODEL_BUSY, None)
    assert http_answer(RunBusyError("x")) == (409, wire.RUN_BUSY, None)
    assert http_answer(NotRegisteredError("x")) == (404, wire.NOT_FOUND, None)
    assert http_answer(InvalidInputError("x")) == (422, wire.INVALID_REQUEST, None)
    assert http_answer(UnsupportedCapability("sft", "B")) == (
        501,
        wire.UNSUPPORTED_CAPABILITY,
        "sft",
    )
    assert http_answer(BackendError("x")) is None


@pytest.mark.parametrize(
    ("status", "kind", "expected"),
    [
        (401, "", ServerlessAuthError),
        (404, "", NotRegisteredError),
        (409, "", ModelBusyError),
        (400, "whatever", InvalidInputError),
        (413, wire.REQUEST_TOO_LARGE, InvalidInputError),
        (422, "", InvalidInputError),
        (429, wire.QUOTA_EXCEEDED, QuotaExceededError),
        (507, "", QuotaExceededError),
    ],
)
def test_a_status_without_our_type_still_reads_as_its_error(
    status: int, kind: str, expected: type[Exception]
) -> None:
    assert type(error_for(status, kind, "m", None)) is expected


@pytest.mark.parametrize(("status", "kind"), [(500, ""), (501, ""), (429, wire.RATE_LIMITED)])
def test_an_answer_no_row_names_is_left_to_the_caller(status: int, kind: str) -> None:
    assert error_for(status, kind, "m", None) is None
