"""ART 0.5.23's `FileLogger` (art/langgraph/logging.py, stdlib only) and arthex's under
`arthex.art` write the same bytes and keep the same entries. ART's `art.langgraph` package
needs LangChain, which ART's venv lacks, so ART's module file is located by ART's interpreter
and run here."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path
from typing import Any

from arthex.art.langgraph.logging import FileLogger

from .art_env import art_environment, art_python

ENTRIES: list[tuple[str, Any]] = [
    ("c1", {"input": ["hi"], "output": "hello", "tools": None}),
    ("c2", 3.5),
    ("c3", "multi\nline"),
    ("c4", ["é", None, (1, 2)]),
    ("", ""),
]


def arts_file_logger() -> Any:
    code = "import importlib.util, json; print(json.dumps(list(importlib.util.find_spec('art')" \
        ".submodule_search_locations)))"  # fmt: skip
    done = subprocess.run([str(art_python()), "-c", code], capture_output=True, text=True,
                          env=art_environment(), check=True, timeout=120)  # fmt: skip
    (package,) = json.loads(done.stdout)
    spec = importlib.util.spec_from_file_location(
        "art_0_5_23_langgraph_logging", Path(package) / "langgraph" / "logging.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.FileLogger


def test_the_same_lines_and_entries_as_arts(tmp_path: Path) -> None:
    art_logger = arts_file_logger()(str(tmp_path / "art"))
    ours = FileLogger(str(tmp_path / "ours"))
    for logger in (art_logger, ours):
        assert logger.load_logs() == []
        for name, entry in ENTRIES:
            logger.log(name, entry)
    assert (tmp_path / "ours").read_bytes() == (tmp_path / "art").read_bytes()
    assert ours.load_logs() == art_logger.load_logs()
    assert ours.text_path == art_logger.text_path.replace("/art", "/ours")
