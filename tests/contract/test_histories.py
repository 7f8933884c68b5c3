"""The MetricsHistory contract against every history of this repo, the in-memory fake included."""

from __future__ import annotations

from pathlib import Path

import pytest

from arthex.adapters.jsonl_history import JsonlHistory
from arthex.ports.metrics_reporter import MetricsHistory
from arthex.testing.contracts.metrics import MetricsHistoryContract
from arthex.testing.fakes.history import InMemoryHistory


class TestJsonlHistory(MetricsHistoryContract):
    @pytest.fixture
    def history(self, tmp_path: Path) -> MetricsHistory:
        return JsonlHistory(str(tmp_path))


class TestInMemoryHistory(MetricsHistoryContract):
    @pytest.fixture
    def history(self) -> MetricsHistory:
        return InMemoryHistory()
