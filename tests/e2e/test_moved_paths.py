"""The old import paths docs/architecture.md lists still work for one release, and say where
their code went: on import, and when run with `python -m` (where Python hides a warning
raised on behalf of runpy unless the module raises it as its own)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARCHITECTURE = ROOT / "docs" / "architecture.md"

pytestmark = pytest.mark.e2e


def moved_paths() -> dict[str, str]:
    """old path -> new home, read from the "Moved paths" table of docs/architecture.md."""
    section = ARCHITECTURE.read_text().split("## Moved paths", 1)[1]
    moved = {}
    for row in re.findall(r"^\|(.+)\|(.+)\|$", section, re.MULTILINE):
        olds = re.findall(r"`(arthex(?:\.\w+)+)`", row[0])
        news = re.findall(r"`(arthex(?:\.\w+)+)`", row[1])
        for old in olds:
            moved[old] = news[0]
    return moved


def test_the_documented_table_lists_every_moved_path() -> None:
    shims = {
        "arthex." + ".".join(path.relative_to(ROOT / "src").with_suffix("").parts)
        for path in (ROOT / "src").rglob("*.py")
        if "goes away in the next release" in path.read_text()
    }
    assert set(moved_paths()) == shims


def test_each_old_path_imports_with_a_warning_that_names_its_new_home() -> None:
    script = (
        "import importlib, json, sys, warnings\n"
        "found = {}\n"
        "for old in json.loads(sys.argv[1]):\n"
        "    with warnings.catch_warnings(record=True) as caught:\n"
        "        warnings.simplefilter('always')\n"
        "        module = importlib.import_module(old)\n"
        "    found[old] = [str(w.message) for w in caught if w.category is DeprecationWarning]\n"
        "    assert module.__dict__, old\n"
        "print(json.dumps(found))\n"
    )
    moved = moved_paths()
    result = subprocess.run(
        [sys.executable, "-c", script, json.dumps(sorted(moved))],
        capture_output=True,
        text=True,
        check=True,
    )
    found = json.loads(result.stdout)
    for old, new in moved.items():
        assert len(found[old]) == 1, (old, found[old])
        assert f"{old} moved to {new}" in found[old][0], (old, new, found[old])


@pytest.mark.parametrize(
    "old", ["arthex.cli", "arthex.adapters.serverless.server", "arthex.testing.tinker_emulator"]
)
def test_running_an_old_path_with_python_m_warns_and_still_runs(old: str) -> None:
    # default warning filters, as a user's shell has them
    result = subprocess.run(
        [sys.executable, "-m", old, "--help"], capture_output=True, text=True, check=True
    )
    assert f"DeprecationWarning: {old} moved to" in result.stderr, result.stderr
    assert "usage" in result.stdout.lower()
