"""Recorded calls (`core.exchanges`): their timestamps are instants in UTC whatever zone they
were written in, and a trajectory's exchanges count every API's records."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from openai.types.chat import ChatCompletion

from arthex.core.exchanges import ChatCompletionsExchange, TrajectoryExchanges

RESPONSE = ChatCompletion.model_validate_json(
    json.dumps(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "hello"},
                    "finish_reason": "stop",
                }
            ],
        }
    )
)


def exchange(start: datetime, end: datetime) -> ChatCompletionsExchange:
    return ChatCompletionsExchange(start_time=start, end_time=end, request={}, response=RESPONSE)


def test_a_naive_timestamp_is_read_as_utc_even_on_a_machine_outside_utc(
    tokyo_clock: None,
) -> None:
    """A run written without zones (ART's parquet) means UTC; reading it in Tokyo must not
    shift its calls by nine hours."""
    record = exchange(datetime(2024, 1, 2, 3, 4, 5), datetime(2024, 1, 2, 3, 4, 6))
    assert record.start_time.isoformat() == "2024-01-02T03:04:05+00:00"
    assert record.end_time.isoformat() == "2024-01-02T03:04:06+00:00"


def test_a_timestamp_with_an_offset_keeps_its_instant_and_is_given_in_utc(
    tokyo_clock: None,
) -> None:
    """Noon at UTC+2 is 10:00 UTC (not noon UTC, and not 19:00 in the machine's zone)."""
    plus_two = timezone(timedelta(hours=2))
    record = exchange(datetime(2024, 1, 2, 12, tzinfo=plus_two), datetime(2024, 1, 2, 12, 0, 1))
    assert record.start_time.isoformat() == "2024-01-02T10:00:00+00:00"
    assert record.start_time.tzinfo is UTC
    assert record.end_time.isoformat() == "2024-01-02T12:00:01+00:00"


@pytest.mark.parametrize("api", ["chat_completions", "completions", "responses", "messages"])
def test_a_single_record_of_any_api_makes_the_exchanges_non_empty(api: str) -> None:
    """ART's `completions`, `responses` and `messages` records count as recorded calls too."""
    records: dict[str, list[Any]] = {
        "chat_completions": [exchange(datetime.now(UTC), datetime.now(UTC))]
    }
    records.update({other: [{"id": other}] for other in ("completions", "responses", "messages")})
    exchanges = TrajectoryExchanges.model_validate({api: records[api]})
    assert exchanges
    assert len(exchanges) == 1
    assert not TrajectoryExchanges()


def test_the_exchanges_count_the_records_of_every_api() -> None:
    now = datetime.now(UTC)
    exchanges = TrajectoryExchanges(
        chat_completions=[exchange(now, now)],
        completions=[{"n": n} for n in range(2)],
        responses=[{"n": n} for n in range(3)],
        messages=[{"n": n} for n in range(4)],
    )
    assert len(exchanges) == 1 + 2 + 3 + 4
