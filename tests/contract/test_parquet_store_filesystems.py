"""ParquetTrajectoryStore on a pyarrow filesystem that is not the local disk: the object-store
code path (temp object, copy to a free name), against the whole contract, without a server.
The same store on S3 is tests/e2e/test_s3_store.py."""

from __future__ import annotations

from pathlib import Path

import pyarrow.fs as pafs
import pytest

from arthex.adapters.parquet.store import ParquetTrajectoryStore
from arthex.ports.trajectory_store import TrajectoryStore
from arthex.testing.contracts.trajectory_store import TrajectoryStoreContract


class TestParquetStoreOnAFilesystemWithoutLinks(TrajectoryStoreContract):
    @pytest.fixture
    def store(self, tmp_path: Path) -> TrajectoryStore:
        subtree = pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem())
        return ParquetTrajectoryStore("art/runs", filesystem=subtree)


class TestParquetStoreOnAFileUri(TrajectoryStoreContract):
    @pytest.fixture
    def store(self, tmp_path: Path) -> TrajectoryStore:
        return ParquetTrajectoryStore((tmp_path / "art").as_uri())
