"""A base_path that cannot be written is one clear error naming the folder, when the model is
built or registered: not a failed write deep inside the first `log` or `train`."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import arthex
from arthex.adapters.files import UnwritableDirectoryError
from arthex.testing.fakes.backend import InMemoryBackend


def _make_read_only(path: Path) -> bool:
    """Read-only for this process: an immutable folder as root (root ignores mode bits),
    mode 0555 otherwise. False when neither is possible here."""
    if os.geteuid() != 0:
        path.chmod(0o555)
        return True
    chattr = shutil.which("chattr")
    if chattr is None:
        return False
    done = subprocess.run([chattr, "+i", str(path)], capture_output=True, check=False)
    return done.returncode == 0


def _make_writable(path: Path) -> None:
    if os.geteuid() != 0:
        path.chmod(0o755)
    else:
        subprocess.run(["chattr", "-i", str(path)], capture_output=True, check=False)


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "read-only"
    folder.mkdir()
    if not _make_read_only(folder):
        pytest.skip("cannot make a folder read-only here (root without chattr)")
    try:
        yield folder
    finally:
        _make_writable(folder)


def test_building_a_model_on_a_read_only_base_path_names_the_folder(read_only: Path) -> None:
    builders: list[Callable[[], object]] = [
        lambda: arthex.Model(name="m", project="p", base_path=str(read_only)),
        lambda: arthex.TrainableModel(
            name="m", project="p", base_model="tiny", base_path=str(read_only / "runs")
        ),
    ]
    for build in builders:
        with pytest.raises(UnwritableDirectoryError) as caught:
            build()
        message = str(caught.value)
        assert str(read_only) in message
        assert "writable" in message
        assert caught.value.__cause__ is None  # one error, not a chain of OS tracebacks
        assert isinstance(caught.value, arthex.ArthexError)


def test_a_base_path_under_a_file_names_it(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(UnwritableDirectoryError, match="is a file"):
        arthex.Model(name="m", project="p", base_path=str(blocker / "runs"))


def test_registering_after_the_folder_became_read_only_names_it(tmp_path: Path) -> None:
    base = tmp_path / "runs"
    model = arthex.TrainableModel(
        name="m", project="p", base_model="tiny", base_path=str(base), report_metrics=[]
    )
    base.mkdir()
    if not _make_read_only(base):
        pytest.skip("cannot make a folder read-only here (root without chattr)")
    try:
        with pytest.raises(UnwritableDirectoryError) as caught:
            asyncio.run(model.register(InMemoryBackend(one_trainer=True)))
    finally:
        _make_writable(base)
    assert str(base / "p" / "models" / "m") in str(caught.value)
    assert list(base.iterdir()) == []
