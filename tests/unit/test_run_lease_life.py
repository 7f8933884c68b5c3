"""The run lease's life in one process, as ART users and notebooks meet it: closing the backend
gives its models' leases back, a model dropped without `close` gives its lease back when it is
collected (a reference cycle included), and a second live model of the process on the run is
refused with where the first was registered, until the first's backend is closed."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import sys
import weakref
from pathlib import Path

import pytest

import arthex
from arthex.core.errors import RunBusyError
from arthex.testing.builders import make_group
from arthex.testing.fakes.backend import InMemoryBackend


def trainable(base: Path) -> arthex.TrainableModel:
    return arthex.TrainableModel(
        name="m", project="p", base_model="tiny", base_path=str(base), report_metrics=[]
    )


def backend() -> InMemoryBackend:
    return InMemoryBackend(one_trainer=True)  # a backend whose checkpoints others see


def lease_text(base: Path) -> str:
    return (base / "p" / "models" / "m" / "trainer.lease").read_text()


def holder_pid(base: Path) -> int | None:
    text = lease_text(base)
    return int(json.loads(text)["pid"]) if text else None


def test_closing_the_backend_gives_the_models_lease_back(tmp_path: Path) -> None:
    async def go() -> tuple[int | None, int | None, int | None]:
        first_backend = backend()
        first = trainable(tmp_path)
        await first.register(first_backend)
        await first.train([make_group((0.0, 1.0))])
        held = holder_pid(tmp_path)
        await first_backend.close()  # ART's ending: no model.close()
        released = holder_pid(tmp_path)
        second = trainable(tmp_path)
        await second.register(backend())
        taken = holder_pid(tmp_path)
        assert first.trainable  # the first model is still alive: only its backend closed
        await second.close()
        return held, released, taken

    held, released, taken = asyncio.run(go())
    assert (held, released, taken) == (os.getpid(), None, os.getpid())


def test_a_model_dropped_without_close_gives_its_lease_back_when_collected(
    tmp_path: Path,
) -> None:
    async def go() -> tuple[int | None, bool, int | None]:
        first = trainable(tmp_path)
        first_backend = backend()
        await first.register(first_backend)
        await first.train([make_group((0.0, 1.0))])
        await first.log([make_group((0.5, 1.0))], split="val")
        await first.delete_checkpoints()
        held = holder_pid(tmp_path)
        gone = weakref.ref(first)
        del first, first_backend
        gc.collect()
        return held, gone() is None, holder_pid(tmp_path)

    held, collected, after = asyncio.run(go())
    assert held == os.getpid()
    assert collected, "nothing may keep a dropped model alive"
    assert after is None, "the collected model gave its lease back"


def test_a_dropped_model_caught_in_a_reference_cycle_does_not_keep_the_run(
    tmp_path: Path,
) -> None:
    """No explicit gc.collect(): the next model's register finds the run held by this process
    and collects the cycle itself."""

    async def go() -> int:
        first = trainable(tmp_path)
        await first.register(backend())
        first.myself = first  # type: ignore[attr-defined]  # a cycle: refcounts never reach 0
        gone = weakref.ref(first)
        del first
        assert gone() is not None, "the cycle keeps it until a collection"
        second = trainable(tmp_path)
        await second.register(backend())
        await second.train([make_group((0.0, 1.0))])
        step = await second.get_step()
        await second.close()
        return step

    gc.disable()  # no collection may happen on its own during the test
    try:
        assert asyncio.run(go()) == 1
    finally:
        gc.enable()


def test_a_second_live_model_is_refused_naming_this_process_and_where_the_first_registered(
    tmp_path: Path,
) -> None:
    async def go() -> tuple[str, int, str, int | None]:
        first_backend = backend()
        first = trainable(tmp_path)
        line = sys._getframe().f_lineno + 1
        await first.register(first_backend)
        before = lease_text(tmp_path)
        second = trainable(tmp_path)
        with pytest.raises(RunBusyError) as refused:
            await second.register(backend())
        assert lease_text(tmp_path) == before, "the refused register wrote nothing"
        await first_backend.close()
        await second.register(backend())  # the first's backend is closed: the run is free
        taken = holder_pid(tmp_path)
        await second.close()
        assert first.trainable  # alive to the end: the refusal was not about a dead model
        return str(refused.value), line, before, taken

    message, line, before, taken = asyncio.run(go())
    assert "another model of this process" in message
    assert f"pid {os.getpid()} on host" in message
    assert f"{__file__}:{line}" in message, message
    assert json.loads(before)["registered_at"] == f"{__file__}:{line}"
    assert "backend.close()" in message and "model.close()" in message
    assert "\n" not in message
    assert taken == os.getpid()


NOTEBOOK_CELL = """
backend = InMemoryBackend(one_trainer=True)
model = arthex.TrainableModel(name="m", project="p", base_model="tiny", base_path=base,
                              report_metrics=[])
await model.register(backend)
await model.train([make_group((0.0, 1.0))])
"""


def test_a_notebook_cell_that_builds_the_model_runs_again_without_closing_anything(
    tmp_path: Path,
) -> None:
    """The cell is compiled as IPython runs a cell with top-level await, and run three times
    in one namespace: each run rebinds `model` and `backend`, dropping the previous ones."""
    import ast

    code = compile(NOTEBOOK_CELL, "<cell>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    namespace = {
        "arthex": arthex,
        "InMemoryBackend": InMemoryBackend,
        "make_group": make_group,
        "base": str(tmp_path),
    }

    async def go() -> list[int]:
        holders = []
        for _ in range(3):
            await eval(code, namespace)
            holders.append(json.loads(lease_text(tmp_path))["pid"])
        await namespace["backend"].close()  # type: ignore[attr-defined]
        return holders

    assert asyncio.run(go()) == [os.getpid()] * 3
    assert lease_text(tmp_path) == ""


def test_a_backend_close_releases_every_lease_even_when_one_release_fails() -> None:
    from arthex.core import lease_book
    from arthex.core.identity import RunRef

    class Owner:
        def __init__(self, name: str, fails: bool) -> None:
            self.run = RunRef("p", name)
            self.fails = fails
            self.released = False

        async def release_lease_from(self, backend: object) -> None:
            self.released = True
            lease_book.let_go(self)
            if self.fails:
                raise OSError("the lease file's disk went away")

    class Backend:
        pass

    backend = Backend()
    owners = [Owner("a", fails=True), Owner("b", fails=False), Owner("c", fails=True)]
    for owner in owners:
        lease_book.holds(owner, backend)
    with pytest.raises(OSError, match="disk went away"):
        asyncio.run(lease_book.release_leases(backend))
    assert all(owner.released for owner in owners)
