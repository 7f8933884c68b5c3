"""The suite's own order and tiers: the durations record read back from a JUnit report, the
longest files first, and the two-rank contract's CI subset naming real tests."""

from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path

import pytest

from tests import conftest
from tests.contract import test_local_backend as contract

ROOT = Path(__file__).resolve().parents[2]


def _durations_tool() -> object:
    path = ROOT / "tools" / "test_durations.py"
    spec = importlib.util.spec_from_file_location("test_durations", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_junit_report_sums_to_seconds_per_file_longest_first(tmp_path: Path) -> None:
    report = tmp_path / "junit.xml"
    report.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.unit.test_suite_tiers" name="a" time="1.5"/>'
        '<testcase classname="tests.contract.test_local_backend.TestLocalBackendTwoRanksContract"'
        ' name="b" time="20.5"/>'
        '<testcase classname="tests.contract.test_local_backend" name="c" time="0.3"/>'
        '<testcase classname="tests.unit.test_suite_tiers" name="d" time="2.0"/>'
        '<testcase classname="tests.gone.test_nothing" name="e" time="9.0"/>'
        "</testsuite></testsuites>"
    )
    got = _durations_tool().durations(report)  # type: ignore[attr-defined]
    # 20.5 + 0.3 in one file (a class's classname names its file), 1.5 + 2.0 in the other;
    # a classname that names no file is dropped
    assert list(got.items()) == [
        ("tests/contract/test_local_backend.py", 20.8),
        ("tests/unit/test_suite_tiers.py", 3.5),
    ]


def test_a_file_not_recorded_is_placed_by_its_folder() -> None:
    recorded = {"tests/unit/test_slow_unit.py": 90.0}
    assert conftest.expected_seconds("tests/unit/test_slow_unit.py", recorded) == 90.0
    assert conftest.expected_seconds("tests/faults/test_new.py", recorded) == 60.0
    assert conftest.expected_seconds("tests/e2e/test_new.py", recorded) == 30.0
    assert conftest.expected_seconds("tests/unit/test_new.py", recorded) == 2.0


def test_the_committed_record_is_a_mapping_of_existing_files_to_seconds() -> None:
    recorded = conftest._recorded()
    assert len(recorded) > 200
    missing = [path for path in recorded if not (ROOT / path).is_file()]
    assert len(missing) < 10, missing  # a renamed file only loses its place in the order
    assert all(seconds >= 0 for seconds in recorded.values())


def test_the_two_rank_contracts_ci_tests_name_tests_of_its_class() -> None:
    two_ranks = contract.TestLocalBackendTwoRanksContract  # not imported by name: no collection
    names = {
        name
        for name, member in inspect.getmembers(two_ranks)
        if name.startswith("test_") and callable(member)
    }
    assert two_ranks.ci_tests <= names
    assert len(two_ranks.ci_tests) >= 3


@pytest.mark.parametrize("marker", ["soak", "extended"])
def test_the_tiers_are_declared_markers(pytestconfig: pytest.Config, marker: str) -> None:
    declared = [line.split(":", 1)[0] for line in pytestconfig.getini("markers")]
    assert marker in declared
