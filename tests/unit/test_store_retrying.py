"""Which object-store failures are tried again, and the budget's checks. The error texts are
pyarrow's own, as its S3 filesystem raised them against the fault proxy
(tests/faults/test_object_store_faults.py drives the real thing)."""

from __future__ import annotations

import pytest

from arthex.adapters.parquet.retrying import check_budget, is_transient, within_budget
from arthex.adapters.parquet.store import ParquetTrajectoryStore
from arthex.core.errors import InvalidInputError, StoreUnavailableError

SLOW = "When uploading part for key 'k' in bucket 'b': AWS Error SLOW_DOWN during UploadPart"
RESET = "AWS Error NETWORK_CONNECTION during CopyObject operation: curlCode: 56, Failure"
SERVER = "When listing objects under key 'k/' in bucket 'b': AWS Error INTERNAL_FAILURE"
DENIED = "When reading information for key 'k' in bucket 'b': AWS Error ACCESS_DENIED"


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (OSError(SLOW), True),
        (OSError(RESET), True),
        (OSError(SERVER), True),
        (OSError("AWS Error UNKNOWN (HTTP status 503) during GetObject"), True),
        (OSError(DENIED), False),
        (FileNotFoundError(RESET), False),  # a missing key is an answer, not a failure
        (StoreUnavailableError(SLOW), False),  # the budget is spent already
        (ValueError(SLOW), False),
    ],
)
def test_only_busy_or_unreachable_stores_are_tried_again(error: Exception, transient: bool) -> None:
    assert is_transient(error) is transient


def test_a_call_is_tried_until_it_succeeds() -> None:
    seen: list[int] = []

    def call(attempt: int) -> str:
        seen.append(attempt)
        if attempt < 3:
            raise OSError(SLOW)
        return "done"

    assert within_budget("writing s3://b/k", call, 10.0) == "done"
    assert seen == [1, 2, 3]


def test_a_spent_budget_is_one_line_naming_the_key_and_the_budget() -> None:
    def call(attempt: int) -> None:
        raise OSError(RESET + "\nsecond line")

    with pytest.raises(StoreUnavailableError) as failed:
        within_budget("reading s3://b/k/0003.parquet", call, 0)
    message = str(failed.value)
    assert "\n" not in message
    assert message.startswith("reading s3://b/k/0003.parquet failed:")
    assert "0 s retry budget (1 attempt, last: AWS Error NETWORK_CONNECTION" in message


def test_other_failures_are_not_tried_again() -> None:
    seen: list[int] = []

    def call(attempt: int) -> None:
        seen.append(attempt)
        raise OSError(DENIED)

    with pytest.raises(OSError, match="ACCESS_DENIED"):
        within_budget("reading s3://b/k", call, 10.0)
    assert seen == [1]


@pytest.mark.parametrize("budget", [-1, True, "5", float("nan")])
def test_a_bad_budget_is_refused(budget: object) -> None:
    with pytest.raises(InvalidInputError, match="retry_budget"):
        check_budget(budget)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="retry_budget"):
        ParquetTrajectoryStore("s3://b/p", retry_budget=budget)  # type: ignore[arg-type]
