"""Every TrajectoryStore of this repo against the shipped contract, the fake included."""

from __future__ import annotations

from pathlib import Path

import pytest

from arthex.adapters.parquet.store import ParquetTrajectoryStore
from arthex.ports.trajectory_store import TrajectoryStore
from arthex.testing.contracts.trajectory_store import TrajectoryStoreContract
from arthex.testing.fakes.stores import InMemoryTrajectoryStore


class TestParquetTrajectoryStore(TrajectoryStoreContract):
    @pytest.fixture
    def store(self, tmp_path: Path) -> TrajectoryStore:
        return ParquetTrajectoryStore(str(tmp_path / "art"))


class TestInMemoryTrajectoryStore(TrajectoryStoreContract):
    @pytest.fixture
    def store(self) -> TrajectoryStore:
        return InMemoryTrajectoryStore()
