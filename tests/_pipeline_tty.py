"""Run a three-update pipeline on the in-memory ports with this process's stderr as it is (a
pty in tests/unit/test_pipeline_status.py), so its progress line is drawn as a user sees it."""

from __future__ import annotations

import asyncio

from tests.unit._pipeline_world import World
from tests.unit.test_pipeline_updates import one_at_a_time


def main() -> None:
    world = World()
    asyncio.run(one_at_a_time(world, 5, max_steps=3).train())


if __name__ == "__main__":
    main()
