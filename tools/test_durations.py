"""Write tests/durations.json, each test file's seconds in a whole run, from pytest's JUnit XML.

    pytest -n auto --dist loadfile --junitxml=/tmp/junit.xml
    python tools/test_durations.py /tmp/junit.xml > tests/durations.json

tests/conftest.py starts the longest files first from it, so that `make test`'s workers end
together instead of one of them running a long file alone at the end. Only the order depends
on it: a stale or missing entry changes nothing else.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ElementTree
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_file(classname: str) -> str | None:
    """The test file a JUnit classname (`tests.e2e.test_x` or `tests.e2e.test_x.TestY`) is in."""
    parts = classname.split(".")
    for end in range(len(parts), 0, -1):
        path = "/".join(parts[:end]) + ".py"
        if (ROOT / path).is_file():
            return path
    return None


def durations(junit: Path) -> dict[str, float]:
    seconds: defaultdict[str, float] = defaultdict(float)
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        path = test_file(case.get("classname", ""))
        if path is not None:
            seconds[path] += float(case.get("time", "0"))
    return {path: round(s, 1) for path, s in sorted(seconds.items(), key=lambda x: (-x[1], x[0]))}


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tools/test_durations.py JUNIT_XML > tests/durations.json")
    print(json.dumps(durations(Path(sys.argv[1])), indent=1))
