"""No code of the project imports an old path docs/architecture.md lists as moved: each one
warns with arthex's own DeprecationWarning, meant for users' code, not the project's."""

from __future__ import annotations

import re
from pathlib import Path

from tests.e2e.test_moved_paths import moved_paths

ROOT = Path(__file__).resolve().parents[2]
SHIM_TEST = ROOT / "tests" / "e2e" / "test_moved_paths.py"


def test_no_module_of_the_project_imports_a_moved_path() -> None:
    moved = moved_paths()
    assert moved, "the Moved paths table of docs/architecture.md lists nothing"
    pattern = re.compile(
        r"^\s*(?:from\s+(%s)\s+import|import\s+(%s)\b)" % ((r"|".join(map(re.escape, moved)),) * 2),
        re.MULTILINE,
    )
    users = []
    for folder in ("src", "tests", "examples", "benchmarks", "tools"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            text = path.read_text()
            if path == SHIM_TEST or "goes away in the next release" in text:
                continue
            for match in pattern.finditer(text):
                old = match.group(1) or match.group(2)
                users.append(f"{path.relative_to(ROOT)}: {old} (use {moved[old]})")
    assert not users, "imports of moved paths:\n" + "\n".join(users)
