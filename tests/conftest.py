"""Suite-wide collection order: the longest files first.

`make test` spreads whole files over xdist workers in collection order (`--dist loadfile
--no-loadscope-reorder`: xdist would otherwise start the files with the most tests first,
which leaves the long few-test interop and fault files to the end, one worker running them
alone while the others wait). Files are ordered by their seconds in a whole run, recorded in
tests/durations.json (`tools/test_durations.py` writes it from a JUnit report); a file it
does not list yet is placed by its folder. Tests do not depend on order.

Two kinds of tests run only when a `-m` expression names them: `soak` sweeps (`make soak`)
and `extended` variants (`make test-extended`): the other parametrizations of a check CI runs
in one or two of them, and the rest of a contract class CI runs a part of (its `ci_tests`).
They keep `make test` within CI's time; run them before a change to what they cover lands.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

DURATIONS_FILE = Path(__file__).parent / "durations.json"
# seconds assumed for a file the record does not list yet, by folder
FOLDER_SECONDS = {"tests/faults/": 60.0, "tests/interop/": 60.0, "tests/e2e/": 30.0}
OTHER_SECONDS = 2.0


def _recorded() -> dict[str, float]:
    try:
        data = json.loads(DURATIONS_FILE.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.items()} if isinstance(data, dict) else {}


def expected_seconds(path: str, recorded: dict[str, float]) -> float:
    """A test file's expected seconds: recorded, else its folder's guess."""
    if path in recorded:
        return recorded[path]
    return next((s for f, s in FOLDER_SECONDS.items() if path.startswith(f)), OTHER_SECONDS)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    recorded = _recorded()
    # stable: a file's tests keep their order, and files of equal seconds stay whole
    items.sort(key=lambda item: -expected_seconds(item.nodeid.split("::")[0], recorded))
    for item in items:
        # a test class may name the tests CI runs of it (`ci_tests`); the rest are extended
        keep = getattr(getattr(item, "cls", None), "ci_tests", None)
        if keep is not None and getattr(item, "originalname", item.name) not in keep:
            item.add_marker(pytest.mark.extended)
    markexpr = config.getoption("markexpr") or ""
    # soak sweeps and extended variants run only when a -m expression names them
    skipped = {
        "soak": "a soak sweep: run with `make soak` (pytest -m soak)",
        "extended": "an extended variant, left out of CI: run with `make test-extended`",
    }
    for marker, reason in skipped.items():
        if marker in markexpr:
            continue
        skip = pytest.mark.skip(reason=reason)
        for item in items:
            if item.get_closest_marker(marker):
                item.add_marker(skip)
