"""A third party's broken adapter fails the kit with the values shown, not a bare AssertionError."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BROKEN_STORE_TEST = """
import pytest
from arthex.testing.contracts.trajectory_store import TrajectoryStoreContract
from arthex.testing.fakes.stores import InMemoryTrajectoryStore


class DropsTheLastGroup(InMemoryTrajectoryStore):
    async def read(self, run, split, step):
        return (await super().read(run, split, step))[:-1]


class TestBrokenStore(TrajectoryStoreContract):
    @pytest.fixture
    def store(self):
        return DropsTheLastGroup()
"""


def test_a_deliberately_broken_store_fails_with_a_rewritten_assertion(tmp_path: Path) -> None:
    (tmp_path / "test_broken_store.py").write_text(BROKEN_STORE_TEST)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-p", "no:randomly"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1, result.stdout[-2000:]
    failure_lines = [line for line in result.stdout.splitlines() if line.startswith("E ")]
    # pytest's rewriting shows the compared values and where they came from
    assert any("assert 4 == 5" in line for line in failure_lines), failure_lines[:10]
    assert any("where 4 = len(" in line for line in failure_lines), failure_lines[:10]


BROKEN_PIPELINE_STATE_TEST = """
import pytest
from arthex.testing.contracts.pipeline_state import PipelineStateStoreContract
from arthex.testing.fakes.pipeline_state import InMemoryPipelineStateStore


class ForgetsOtherRuns(InMemoryPipelineStateStore):
    async def load(self, run):
        return None


class TestBrokenPipelineState(PipelineStateStoreContract):
    @pytest.fixture
    def state_store(self):
        return ForgetsOtherRuns()
"""


def test_every_contract_module_is_registered_for_assertion_rewriting() -> None:
    """The kit's register list names exactly the modules on disk (read as files here)."""
    from arthex.testing import contracts

    on_disk = {
        path.stem
        for path in Path(contracts.__file__).parent.glob("*.py")
        if path.stem != "__init__"
    }
    assert set(contracts.MODULES) == on_disk


def test_a_broken_pipeline_state_store_fails_with_a_rewritten_assertion(tmp_path: Path) -> None:
    (tmp_path / "test_broken_pipeline_state.py").write_text(BROKEN_PIPELINE_STATE_TEST)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-k",
            "loads_back_equal",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1, result.stdout[-2000:]
    failure_lines = [line for line in result.stdout.splitlines() if line.startswith("E ")]
    assert any("assert None == PipelineRecord(" in line for line in failure_lines), failure_lines
    assert any("where None = run(" in line for line in failure_lines), failure_lines[:10]
