"""How the interop suite finds a Python for ART (>= 3.12): on PATH and under pyenv's versions,
each candidate run once; none found is a failure that says what to install, never a skip."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from tests.interop.art_env import find_python


def interpreter(path: Path, answer: str, code: int = 0) -> Path:
    """An executable that answers the version question as a Python would (or fails, as a
    pyenv shim for a version that is not selected does)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho '{answer}'\nexit {code}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def bare(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A PATH holding only what a test puts there, and an empty pyenv root."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "pyenv"))
    return tmp_path


def test_no_python_312_fails_with_what_to_install(bare: Path) -> None:
    interpreter(bare / "bin" / "python3.12", "pyenv: python3.12: command not found", code=127)
    interpreter(bare / "pyenv" / "versions" / "3.11.7" / "bin" / "python3.11", "3 11")
    with pytest.raises(pytest.fail.Exception) as failed:
        find_python()
    message = str(failed.value)
    assert "Python >= 3.12" in message and "pyenv install 3.12" in message
    assert "python3.12 (does not run)" in message
    assert "ARTHEX_INTEROP_PYTHON" in message


def test_a_broken_shim_is_skipped_and_pyenv_versions_are_searched(bare: Path) -> None:
    interpreter(bare / "bin" / "python3.12", "not selected", code=1)
    found = interpreter(bare / "pyenv" / "versions" / "3.13.0" / "bin" / "python3.13", "3 13")
    interpreter(bare / "bin" / "python3", "3 11")
    assert find_python() == (str(found), (3, 13))


def test_the_lowest_usable_version_is_chosen(bare: Path) -> None:
    interpreter(bare / "bin" / "python3.13", "3 13")
    twelve = interpreter(bare / "pyenv" / "versions" / "3.12.1" / "bin" / "python3.12", "3 12")
    assert find_python() == (str(twelve), (3, 12))
