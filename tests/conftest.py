"""Suite-wide collection order: the folders with the longest files first.

`make test` spreads whole files over xdist workers in collection order; starting the long
fault, interop and end-to-end files first leaves the many short unit files to fill the gaps
at the end, instead of one worker finishing a long file alone. Tests do not depend on order.
"""

from __future__ import annotations

import pytest

LONG_FIRST = ("tests/faults/", "tests/interop/", "tests/e2e/", "tests/contract/")


def _rank(item: pytest.Item) -> int:
    for rank, folder in enumerate(LONG_FIRST):
        if item.nodeid.startswith(folder):
            return rank
    return len(LONG_FIRST)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=_rank)  # stable: a file's tests keep their order
    if "soak" in (config.getoption("markexpr") or ""):
        return
    # soak sweeps run only when a -m expression names them (`make soak`)
    skip = pytest.mark.skip(reason="a soak sweep: run with `make soak` (pytest -m soak)")
    for item in items:
        if item.get_closest_marker("soak"):
            item.add_marker(skip)
