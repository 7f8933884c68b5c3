"""The two processes of the shared-ledger test: a trainer and an evaluator on one run.

The trainer trains and calls `delete_checkpoints` in a loop; after each step it tells the
evaluator which step it reached and waits until the evaluator has logged that step. Between
those barriers the evaluator keeps appending filler evaluations of older steps, so the two
really append to `history.jsonl` at the same time. Only the evaluator logs the best
`val/reward` (at BEST_STEP); the trainer logs its own, lower, evaluation at OWN_STEP.
"""

from __future__ import annotations

import asyncio
import random
from multiprocessing.connection import Connection
from typing import Any

PROJECT, NAME = "shared", "ledger"
STEPS = 7
OWN_STEP, OWN_REWARD = 2, 0.5
BEST_STEP, BEST_REWARD = 3, 0.95
FILLER_MAX = 0.3  # filler evaluations never beat OWN_REWARD or BEST_REWARD
FILLER_PER_ROUND = 40
FILLER_AT_LEAST = 3


def trainer_main(base_path: str, evaluator: Connection, results: Connection) -> None:
    asyncio.run(_train(base_path, evaluator, results))


async def _train(base_path: str, evaluator: Connection, results: Connection) -> None:
    from arthex.composition.api import TrainableModel
    from arthex.testing.builders import make_group
    from arthex.testing.fakes.backend import InMemoryBackend

    model = TrainableModel(
        name=NAME, project=PROJECT, base_model="tiny", base_path=base_path, report_metrics=[]
    )
    backend = InMemoryBackend()
    await model.register(backend)
    decisions: list[dict[str, Any]] = []
    try:
        for _ in range(STEPS):
            step = (await model.train([make_group((0.0, 1.0))])).step
            if step == OWN_STEP:
                await model.log(metrics={"reward": OWN_REWARD}, split="val")
            evaluator.send(step)
            assert evaluator.recv() == step  # the barrier: the evaluation of `step` is in
            decision = await model.delete_checkpoints(best_checkpoint_metric="val/reward")
            decisions.append(
                {
                    "step": step,
                    "best": decision.best_step,
                    "deleted": list(decision.deleted),
                    "remaining": await backend.checkpoint_steps(model.run),
                }
            )
        evaluator.send(None)
        results.send(decisions)
    finally:
        await model.close()


def evaluator_main(base_path: str, trainer: Connection, results: Connection) -> None:
    asyncio.run(_evaluate(base_path, trainer, results))


async def _evaluate(base_path: str, trainer: Connection, results: Connection) -> None:
    from arthex.composition.api import Model

    rng = random.Random(7)
    model = Model(name=NAME, project=PROJECT, base_path=base_path, report_metrics=[])
    latest = 0
    filler = 0
    try:
        while True:
            # Append filler evaluations of older steps until the trainer reaches a new one
            # (at least FILLER_AT_LEAST per round, so some always land mid-step).
            round_start = filler
            while (
                latest > 0
                and filler < FILLER_PER_ROUND * latest
                and (filler - round_start < FILLER_AT_LEAST or not trainer.poll())
            ):
                step = rng.choice([s for s in range(latest + 1) if s != BEST_STEP])
                await model.log(
                    metrics={"reward": rng.uniform(0.0, FILLER_MAX)}, split="val", step=step
                )
                filler += 1
            step = trainer.recv()
            if step is None:
                break
            latest = step
            reward = BEST_REWARD if step == BEST_STEP else rng.uniform(0.0, FILLER_MAX)
            await model.log(metrics={"reward": reward}, split="val", step=step)
            trainer.send(step)
        results.send(filler)
    finally:
        await model.close()
