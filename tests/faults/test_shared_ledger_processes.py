"""A trainer and an evaluator process on one run: the best checkpoint is never deleted.

The trainer's retention decisions must see the evaluator's `val/reward` rows, appended to the
same `history.jsonl` by another process while the trainer runs (see _shared_ledger.py).
"""

from __future__ import annotations

import asyncio
import multiprocessing
from pathlib import Path
from typing import Any

import pytest

from arthex.adapters.jsonl_history import JsonlHistory
from arthex.core.identity import RunRef

from . import _shared_ledger as scenario


def per_step_means(base: Path) -> dict[int, float]:
    """The oracle: a fresh read of the ledger, averaged per step by hand."""
    rows = asyncio.run(JsonlHistory(str(base)).rows(RunRef(scenario.PROJECT, scenario.NAME)))
    sums: dict[int, list[float]] = {}
    for row in rows:
        value = row.values.get("val/reward")
        if value is not None:
            sums.setdefault(row.step, []).append(value)
    return {step: sum(values) / len(values) for step, values in sums.items()}


@pytest.mark.faults
def test_the_best_checkpoint_logged_by_an_evaluator_process_is_never_deleted(
    tmp_path: Path,
) -> None:
    context = multiprocessing.get_context("spawn")
    trainer_end, evaluator_end = context.Pipe()
    trainer_results, trainer_out = context.Pipe(duplex=False)
    evaluator_results, evaluator_out = context.Pipe(duplex=False)
    trainer = context.Process(
        target=scenario.trainer_main, args=(str(tmp_path), trainer_end, trainer_out)
    )
    evaluator = context.Process(
        target=scenario.evaluator_main, args=(str(tmp_path), evaluator_end, evaluator_out)
    )
    trainer.start()
    evaluator.start()
    try:
        for end in (trainer_end, evaluator_end, trainer_out, evaluator_out):
            end.close()
        assert trainer_results.poll(120), "the trainer process reported nothing"
        decisions: list[dict[str, Any]] = trainer_results.recv()
        assert evaluator_results.poll(60), "the evaluator process reported nothing"
        filler: int = evaluator_results.recv()
        trainer.join(60)
        evaluator.join(60)
        assert trainer.exitcode == 0
        assert evaluator.exitcode == 0
    finally:
        for process in (trainer, evaluator):
            if process.is_alive():
                process.kill()
                process.join()

    means = per_step_means(tmp_path)
    assert max(means, key=lambda step: means[step]) == scenario.BEST_STEP
    # the evaluator really appended while the trainer trained and decided
    assert filler >= scenario.FILLER_AT_LEAST * scenario.STEPS
    assert [d["step"] for d in decisions] == list(range(1, scenario.STEPS + 1))
    for decision in decisions:
        assert scenario.BEST_STEP not in decision["deleted"], decision
        if decision["step"] >= scenario.BEST_STEP:
            assert decision["best"] == scenario.BEST_STEP, decision
            assert scenario.BEST_STEP in decision["remaining"], decision
    assert decisions[-1]["remaining"] == [scenario.BEST_STEP, scenario.STEPS]
