"""RunTable, the runs a Local or Tinker backend has open: forgetting one run (its model was
deleted) hands back its state, a later open runs the opener again, and a forget racing an open
of the same run waits for it and drops what it opened."""

from __future__ import annotations

import asyncio

import pytest

from arthex.adapters.inference.engine_pool import RunTable
from arthex.core.errors import NotRegisteredError
from arthex.core.identity import RunRef

RUN = RunRef("proj", "agent")
OTHER = RunRef("proj", "other")


class Opener:
    """Opens a run as a numbered state, counting its calls; `gate` holds an open midway."""

    def __init__(self) -> None:
        self.calls = 0
        self.gate = asyncio.Event()
        self.gate.set()
        self.entered = asyncio.Event()

    async def __call__(self) -> str:
        self.calls += 1
        self.entered.set()
        await self.gate.wait()
        return f"state-{self.calls}"


def test_forget_returns_the_state_and_the_next_open_starts_afresh() -> None:
    async def main() -> None:
        table: RunTable[str] = RunTable("TestBackend")
        opener = Opener()
        assert await table.open(RUN, opener) == "state-1"
        assert await table.open(OTHER, opener) == "state-2"
        assert await table.open(RUN, opener) == "state-1"  # opened once
        assert await table.forget(RUN) == "state-1"
        assert RUN not in table and OTHER in table and len(table) == 1
        with pytest.raises(NotRegisteredError, match="not registered with this TestBackend"):
            table.require(RUN)
        assert await table.forget(RUN) is None  # twice: nothing left
        assert await table.open(RUN, opener) == "state-3"  # the opener runs again
        assert opener.calls == 3
        assert table.require(OTHER) == "state-2"  # the other run was left alone

    asyncio.run(main())


def test_forget_racing_an_open_waits_for_it_and_drops_what_it_opened() -> None:
    async def main() -> tuple[str, str | None, bool]:
        table: RunTable[str] = RunTable("TestBackend")
        opener = Opener()
        opener.gate.clear()
        opening = asyncio.create_task(table.open(RUN, opener))
        await opener.entered.wait()  # the open is inside its opener
        forgetting = asyncio.create_task(table.forget(RUN))
        await asyncio.sleep(0.01)
        waited = not forgetting.done()
        opener.gate.set()
        return await opening, await forgetting, waited and RUN not in table

    opened, forgotten, dropped = asyncio.run(main())
    assert opened == forgotten == "state-1"
    assert dropped


def test_forget_on_a_closed_table_finds_nothing() -> None:
    async def main() -> str | None:
        table: RunTable[str] = RunTable("TestBackend")
        await table.open(RUN, Opener())
        assert table.close() == ["state-1"]
        return await table.forget(RUN)

    assert asyncio.run(main()) is None
