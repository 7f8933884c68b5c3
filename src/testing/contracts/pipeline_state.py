"""The PipelineStateStore contract: subclass, override the `state_store` fixture.

class TestMyStateStore(PipelineStateStoreContract):
    @pytest.fixture
    def state_store(self, tmp_path):
        return MyStateStore(tmp_path)
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest

from ...core.identity import RunRef
from ...core.pipeline_record import InFlight, PipelineRecord
from ...ports.trajectory_store import PipelineStateStore

T = TypeVar("T")
RUN = RunRef("contract-project", "contract-run")
OTHER_RUN = RunRef("contract-project", "other-run")


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coroutine)


def full_record() -> PipelineRecord:
    """A record with every field set, and index runs of several shapes."""
    return PipelineRecord(
        step=7,
        offset=5000,
        pending=[4990, 4991, 4993, 4999],
        discarded={"stale": [3, 4, 5, 9], "zero_variance": range(100, 3100), "errored": [0]},
        trained_groups=1890,
        in_flight=InFlight(
            step=7,
            indices=[4980, 4981, 4985],
            metrics={"time/step_rollout_s": 1.5},
            discarded={"stale": [4982], "errored": [4983, 4984]},
        ),
        stop_at_step=20,
        evaluations_due=[5, 7],
        last_eval_step=7,
        best_eval=(5, 0.625),
        totals={"wall_s": 12.25, "trained_tokens": 4096.0},
    )


class PipelineStateStoreContract:
    @pytest.fixture
    def state_store(self) -> PipelineStateStore:
        raise NotImplementedError("override the `state_store` fixture to return your store")

    def test_a_run_without_a_record_loads_none(self, state_store: PipelineStateStore) -> None:
        assert run(state_store.load(RUN)) is None

    def test_a_saved_record_loads_back_equal(self, state_store: PipelineStateStore) -> None:
        record = full_record()
        run(state_store.save(RUN, record))
        assert run(state_store.load(RUN)) == record

    def test_a_save_replaces_the_previous_record(self, state_store: PipelineStateStore) -> None:
        run(state_store.save(RUN, full_record()))
        later = PipelineRecord(step=8, offset=5001, trained_groups=1900)
        run(state_store.save(RUN, later))
        assert run(state_store.load(RUN)) == later

    def test_runs_keep_their_own_records(self, state_store: PipelineStateStore) -> None:
        run(state_store.save(RUN, full_record()))
        assert run(state_store.load(OTHER_RUN)) is None
        other = PipelineRecord(step=1, offset=2, pending=[1])
        run(state_store.save(OTHER_RUN, other))
        assert run(state_store.load(RUN)) == full_record()
        assert run(state_store.load(OTHER_RUN)) == other
