"""The model's side of the run lease: who takes it, when, and when it is given back."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import arthex
from arthex.adapters.run_files.lease import FileRunLeases
from arthex.core.errors import RunBusyError
from arthex.testing.builders import make_group
from arthex.testing.fakes.backend import InMemoryBackend
from arthex.testing.fakes.leases import InMemoryRunLeases


def trainable(base: Path, leases: object) -> arthex.TrainableModel:
    return arthex.TrainableModel(
        name="m",
        project="p",
        base_model="tiny",
        base_path=str(base),
        report_metrics=[],
        leases=leases,  # type: ignore[arg-type]
    )


def files_under(base: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(base)): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()
    }


def test_a_second_trainer_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    leases = InMemoryRunLeases()

    async def go() -> tuple[dict[str, bytes], dict[str, bytes], str, int]:
        first = trainable(tmp_path, leases)
        await first.register(InMemoryBackend(one_trainer=True))
        await first.train([make_group((0.0, 1.0))])
        holder = leases.held[first.run].holder.pid
        before = files_under(tmp_path)
        second = trainable(tmp_path / "elsewhere", leases)  # a different folder: still refused
        with pytest.raises(RunBusyError) as refused:
            await second.register(InMemoryBackend(one_trainer=True))
        after = files_under(tmp_path)
        await first.close()
        return before, after, str(refused.value), holder

    before, after, message, holder = asyncio.run(go())
    assert before == after
    assert not (tmp_path / "elsewhere").exists()
    assert f"pid {holder} on host" in message


def test_the_lease_is_given_back_at_close_and_taken_by_the_next_trainer(tmp_path: Path) -> None:
    leases = FileRunLeases(str(tmp_path))

    async def go() -> int:
        first = trainable(tmp_path, leases)
        await first.register(InMemoryBackend(one_trainer=True))
        assert leases.path(first.run).read_text()  # held: names its holder
        await first.close()
        assert leases.path(first.run).read_text() == ""
        second = trainable(tmp_path, leases)
        await second.register(InMemoryBackend(one_trainer=True))
        await second.close()
        return len(leases.path(second.run).read_text())

    assert asyncio.run(go()) == 0


def test_loggers_and_backends_without_shared_checkpoints_take_no_lease(tmp_path: Path) -> None:
    leases = InMemoryRunLeases()

    async def go() -> None:
        trainer = trainable(tmp_path, leases)
        await trainer.register(InMemoryBackend(one_trainer=True))
        evaluator = arthex.Model(name="m", project="p", base_path=str(tmp_path), report_metrics=[])
        await evaluator.log([make_group((0.5, 1.0))], split="val")  # alongside the trainer
        await trainer.close()
        per_process = trainable(tmp_path, leases)
        await per_process.register(InMemoryBackend())  # its checkpoints are its own
        assert not leases.held
        await per_process.close()

    asyncio.run(go())


def test_registering_again_keeps_the_lease_and_a_failed_register_gives_it_back(
    tmp_path: Path,
) -> None:
    leases = InMemoryRunLeases()

    class BrokenBackend(InMemoryBackend):
        async def register(self, model: arthex.ModelSpec) -> None:
            raise OSError("disk full")

    async def go() -> None:
        model = trainable(tmp_path, leases)
        await model.register(InMemoryBackend(one_trainer=True))
        await model.register(InMemoryBackend(one_trainer=True))  # same model: no conflict
        assert len(leases.held) == 1
        await model.close()
        failing = trainable(tmp_path, leases)
        with pytest.raises(OSError, match="disk full"):
            await failing.register(BrokenBackend(one_trainer=True))
        assert not leases.held

    asyncio.run(go())
