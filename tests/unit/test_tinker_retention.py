"""Deleting a Tinker run's checkpoints keeps `tinker-run.json` and the service in step even
when the process dies between deleting on the service and writing the record: the record
names what it is deleting before the service deletes it, and the next backend finishes it.

The service is test_tinker_datums' fake (real `tinker.types`, no socket); the crash is a
BaseException raised by its delete call, as a killed process would stop there.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("tinker")

from arthex.core.config import TrainConfig
from tests.unit.test_tinker_datums import RUN, FakeRest, FakeTinker, make_backend, pair, spec

SAMPLER_1 = "tinker://run-1/sampler_weights/step_000001"
STATE_1 = "tinker://run-1/weights/step_000001"


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the model's base_path is the working directory


class Crash(BaseException):
    """The process dies here."""


def record(tmp_path: Path) -> dict[str, Any]:
    found = list(tmp_path.rglob("tinker-run.json"))
    assert len(found) == 1, found
    data: dict[str, Any] = json.loads(found[0].read_text())
    return data


def test_a_crash_between_the_service_and_the_record_is_finished_by_the_next_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeTinker()
    original = FakeRest.delete_checkpoint_from_tinker_path
    seen: list[str] = []

    def crashing(self: FakeRest, tinker_path: str) -> Any:
        seen.append(tinker_path)
        if len(seen) == 2:
            raise Crash
        return original(self, tinker_path)

    async def train_then_crash() -> None:
        backend = make_backend(fake, tmp_path)
        await backend.register(spec())
        for _ in range(2):
            async for _m in backend.train_steps(RUN, [pair()], TrainConfig()):
                pass
        with pytest.raises(Crash):
            await backend.delete_checkpoint_files(RUN, {0})
        # no close: the process is gone

    with monkeypatch.context() as patch:
        patch.setattr(FakeRest, "delete_checkpoint_from_tinker_path", crashing)
        asyncio.run(train_then_crash())
    assert seen == [SAMPLER_1, STATE_1]
    on_service = fake.checkpoints["run-1"]
    assert SAMPLER_1 not in on_service and STATE_1 in on_service
    crashed = record(tmp_path)
    assert [c["step"] for c in crashed["checkpoints"]] == [0, 2]  # step 1 is not served again
    assert crashed["deleting"] == [STATE_1]

    async def next_process() -> list[int]:
        backend = make_backend(fake, tmp_path)
        try:
            await backend.register(spec())
            return await backend.checkpoint_steps(RUN)
        finally:
            await backend.close()

    assert asyncio.run(next_process()) == [0, 2]
    assert STATE_1 not in fake.checkpoints["run-1"]
    assert record(tmp_path)["deleting"] == []


def test_a_deletion_names_nothing_pending_once_done(tmp_path: Path) -> None:
    fake = FakeTinker()

    async def main() -> list[int]:
        backend = make_backend(fake, tmp_path)
        await backend.register(spec())
        try:
            for _ in range(2):
                async for _m in backend.train_steps(RUN, [pair()], TrainConfig()):
                    pass
            return await backend.delete_checkpoint_files(RUN, {0})
        finally:
            await backend.close()

    assert asyncio.run(main()) == [1]
    assert record(tmp_path)["deleting"] == []
    assert fake.calls("delete") == [SAMPLER_1, STATE_1]
