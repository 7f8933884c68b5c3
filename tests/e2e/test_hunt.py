"""tools/hunt.py (`make hunt`) runs a selection several times under load and names every test
that failed in any run, with the runs it failed in: here on a planted file whose tests pass
always, fail always, and fail in the second run only."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]

PLANTED = textwrap.dedent(
    """
    from pathlib import Path

    COUNTER = Path(__file__).with_name("runs-seen")


    def test_passes() -> None:
        assert True


    def test_fails_always() -> None:
        assert 1 == 2


    class TestOnce:
        def test_fails_in_the_second_run_only(self) -> None:
            seen = int(COUNTER.read_text()) + 1 if COUNTER.exists() else 1
            COUNTER.write_text(str(seen))
            assert seen != 2
    """
)


def hunt(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(REPO / "tools" / "hunt.py"), *args]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)


def test_the_hunt_names_each_failing_test_with_the_runs_it_failed_in(tmp_path: Path) -> None:
    planted = tmp_path / "test_planted.py"
    planted.write_text(PLANTED)
    done = hunt("--runs", "3", "--load", "1", "--", "-q", "-p", "no:cacheprovider", str(planted))
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    summary = done.stdout[done.stdout.index("hunt: 3 run(s)") :]
    assert "2 test(s) failed" in summary, summary
    assert "test_planted.py::test_fails_always  (run 1, 2, 3)" in summary, summary
    assert "test_planted.py::TestOnce::test_fails_in_the_second_run_only  (run 2)" in summary
    assert "test_passes" not in summary


def test_a_clean_hunt_exits_zero_and_a_bad_argument_is_refused(tmp_path: Path) -> None:
    planted = tmp_path / "test_fine.py"
    planted.write_text("def test_fine() -> None:\n    assert True\n")
    done = hunt("--runs", "2", "--load", "0", "--", "-q", "-p", "no:cacheprovider", str(planted))
    assert done.returncode == 0, done.stdout[-3000:]
    assert "hunt: 2 run(s)" in done.stdout and "no test failed" in done.stdout
    refused = hunt("--runs", "0")
    assert refused.returncode == 2
    assert "--runs must be at least 1, got 0" in refused.stderr
