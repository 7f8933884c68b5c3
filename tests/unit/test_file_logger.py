"""`arthex.art.langgraph.logging.FileLogger` (ART's): `{name}: {entry}` lines appended to a
real file and the entries kept in order; bad paths refused before anything is written.
tests/interop/test_art_file_logger.py runs ART's own FileLogger beside it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from arthex.art.langgraph.logging import FileLogger
from arthex.core.errors import InvalidInputError


def test_entries_become_lines_and_are_kept_in_order(tmp_path: Path) -> None:
    path = tmp_path / "thread-1"
    logger = FileLogger(str(path))
    assert not path.exists() and logger.load_logs() == []  # created on the first log
    entry = {"input": ["hi"], "output": "hello", "tools": None}
    logger.log("c1", entry)
    logger.log("c2", 3.5)
    assert path.read_text() == (
        "c1: {'input': ['hi'], 'output': 'hello', 'tools': None}\nc2: 3.5\n"
    )
    logs = logger.load_logs()
    assert logs == [("c1", entry), ("c2", 3.5)] and logs[0][1] is entry
    logs.clear()  # a copy
    assert len(logger.load_logs()) == 2
    # a second logger on the same file appends; each keeps only its own entries
    other = FileLogger(path)
    other.log("c3", "multi\nline")
    assert path.read_text().endswith("c2: 3.5\nc3: multi\nline\n")
    assert other.load_logs() == [("c3", "multi\nline")]
    assert logger.text_path == str(path) and other.text_path == path


def test_bad_paths_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="folder"):
        FileLogger(tmp_path)
    for bad in ("", 3, None):
        with pytest.raises(InvalidInputError, match="file path"):
            FileLogger(bad)  # type: ignore[arg-type]
    logger = FileLogger(tmp_path / "missing" / "log")  # as ART's: the folder must exist
    with pytest.raises(FileNotFoundError):
        logger.log("c1", "x")
    assert logger.load_logs() == []  # nothing kept for a line that was not written


def test_a_line_the_file_takes_only_part_of_raises_and_is_not_kept(tmp_path: Path) -> None:
    """A file size limit (RLIMIT_FSIZE, SIGXFSZ ignored) makes the kernel take part of the
    line: the logger says so and keeps nothing, where a silent short write would keep it."""
    script = textwrap.dedent(
        """
        import os, resource, signal, sys
        from arthex.utils.file_logger import FileLogger
        path = sys.argv[1]
        with open(path, "w") as f:
            f.write("x" * 10)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (16, 16))
        logger = FileLogger(path)
        try:
            logger.log("call", "a line longer than six bytes")
        except OSError as error:
            print("raised:", error)
        print("kept:", len(logger.load_logs()))
        """
    )
    path = tmp_path / "calls.log"
    done = subprocess.run(
        [sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert f"raised: FileLogger wrote 6 of 35 bytes to {path}" in done.stdout
    assert "kept: 0" in done.stdout
    assert path.stat().st_size == 16
