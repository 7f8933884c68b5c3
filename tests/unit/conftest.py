"""Fixtures shared by the unit tests."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest


@contextmanager
def _local_zone(tz: str) -> Iterator[None]:
    """The process's local time zone set to `tz` (a TZ value) until the block ends."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TZ", tz)
        time.tzset()
        yield
    time.tzset()


@pytest.fixture
def tokyo_clock() -> Iterator[None]:
    """The process's local zone set to UTC+9, so a naive local time would be nine hours off."""
    with _local_zone("Asia/Tokyo"):
        yield


@pytest.fixture
def india_clock() -> Iterator[None]:
    """The process's local zone set to UTC+05:30: a zone off by a fraction of an hour."""
    with _local_zone("IST-5:30"):
        yield
