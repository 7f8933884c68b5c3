"""Runs this folder's verifiers and OpenEnv tests in the venv that has those packages
(envs_venv.py), from the main suite: one test here, which fails with the inner run's report
when any of them fails."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from .envs_venv import ROOT, environment, envs_python

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

INNER_TIMEOUT_S = 1500


def test_the_environment_adapters_pass_in_the_envs_venv(tmp_path: Path) -> None:
    python = envs_python()
    done = subprocess.run(
        [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp",
         str(tmp_path / "inner"), "tests/environments"],
        capture_output=True, text=True, cwd=ROOT, timeout=INNER_TIMEOUT_S,
        env=environment(tmp_path),
    )  # fmt: skip
    report = done.stdout[-8000:] + done.stderr[-4000:]
    assert done.returncode == 0, f"the environments suite failed in {python}:\n{report}"
    assert " passed" in done.stdout and " failed" not in done.stdout, report
