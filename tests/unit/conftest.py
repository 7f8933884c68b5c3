"""Fixtures shared by the unit tests."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest


@pytest.fixture
def tokyo_clock() -> Iterator[None]:
    """The process's local zone set to UTC+9, so a naive local time would be nine hours off."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TZ", "Asia/Tokyo")
        time.tzset()
        yield
    time.tzset()
