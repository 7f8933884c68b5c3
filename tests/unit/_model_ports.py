"""Core models built by hand in unit tests: in-memory ports unless a test names its own."""

from __future__ import annotations

from typing import Any

from arthex.core.model import ModelPorts
from arthex.testing.fakes.history import InMemoryHistory
from arthex.testing.fakes.stores import InMemoryTrajectoryStore

# A test's keyword -> the ModelPorts field it sets.
PORT_KEYWORDS = {
    "store": "store",
    "history": "reporter",
    "mirrors": "mirrors",
    "state": "state",
    "leases": "leases",
}


def ports_from(options: dict[str, Any]) -> ModelPorts:
    """In-memory ports, with the port keywords taken out of `options` (the rest stay)."""
    ports: dict[str, Any] = {"store": InMemoryTrajectoryStore(), "reporter": InMemoryHistory()}
    for keyword, field in PORT_KEYWORDS.items():
        if keyword in options:
            ports[field] = options.pop(keyword)
    return ModelPorts(**ports)
