"""The installed ART wheel against `arthex.art`: every public module and name the wheel has
today is in arthex.art's table (imported, or refused with what to use instead), and the list
the unit tests check (tests/unit/data/art_0_5_23_paths.json) is the wheel's own. A change of
ART's tree, or of the rule that reads it, fails here rather than in a user's script."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from arthex.art import _table

from .art_env import ART_VERSION, SCRIPTS, art_environment, art_python

RECORDED = Path(__file__).parents[1] / "unit" / "data" / "art_0_5_23_paths.json"


def read_the_wheel() -> dict[str, Any]:
    done = subprocess.run(
        [str(art_python()), str(SCRIPTS / "public_paths.py")],
        capture_output=True, text=True, env=art_environment(), timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    listing: dict[str, Any] = json.loads(done.stdout)
    return listing


def test_arthex_art_has_every_module_and_name_of_the_installed_art() -> None:
    wheel = read_the_wheel()
    assert wheel["version"] == ART_VERSION
    missing: list[str] = []
    for path, names in wheel["modules"].items():
        if _table.refused_module(path) is not None:
            continue
        if path not in _table.MODULES:
            missing.append(f"module {path}")
            continue
        missing += [f"{path}.{name}" for name in names if name not in _table.MODULES[path]]
    assert not missing, f"ART {ART_VERSION} paths arthex.art does not know: {missing}"
    assert wheel == json.loads(RECORDED.read_text()), (
        f"{RECORDED} is not what the wheel holds; rewrite it with "
        "`<interop venv>/bin/python tests/interop/art/public_paths.py`"
    )


def test_the_wheels_public_names_refused_by_arthex_art_are_at_most_the_recorded_count() -> None:
    """The names are the wheel's own, read by ART's interpreter now, not the recorded list."""
    from tests.unit.test_art_paths import REFUSED_NAMES_AT_MOST, refused_names

    wheel = read_the_wheel()
    refused = refused_names(wheel["modules"])
    count = sum(len(names) for names in refused.values())
    print(f"arthex.art refuses {count} of ART {ART_VERSION}'s public names; per module:")
    for path, names in sorted(refused.items()):
        print(f"  {path}: {len(names)}")
    assert count <= REFUSED_NAMES_AT_MOST


def test_the_recorded_data_model_fields_are_the_wheels() -> None:
    """tests/unit/test_art_fields.py checks arthex's models against a recording of ART's;
    re-read the wheel so the recording cannot drift from it."""
    done = subprocess.run(
        [str(art_python()), str(SCRIPTS / "model_fields.py")],
        capture_output=True, text=True, env=art_environment(), timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    recorded = json.loads((RECORDED.parent / "art_0_5_23_fields.json").read_text())
    assert json.loads(done.stdout) == recorded
