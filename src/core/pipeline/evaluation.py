"""Evaluations during a pipeline run: `eval_fn(model, step, config)` on chosen steps, one at a
time, beside the rollouts and the updates.

A step is due for evaluation at the start (`eval_at_start`) and every `eval_every_n_steps`
steps after the last one scheduled (ART's rule). Due steps are in the pipeline record and kept
from retention until evaluated; each evaluation ends with a row holding `time/step_eval_s` at
its step, which marks it done. After a crash, a due step whose marker is in the history is
done; one without is evaluated again (if the crash fell between logging its groups and the
marker, those groups are logged twice: evaluations are not exactly-once, updates are).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ..trainable import TrainableModel
from .resume import has_value
from .rollouts import EvalFn, eval_groups

logger = logging.getLogger("arthex")

DONE_KEY = "time/step_eval_s"


class Evaluator:
    def __init__(
        self,
        model: TrainableModel,
        eval_fn: EvalFn[Any, Any],
        config: Any,
        *,
        due: tuple[int, ...],
        last_step: int | None,
        best: tuple[int, float] | None,
        evaluated: tuple[int, ...] = (),
        on_change: Callable[[], Awaitable[None]],
    ) -> None:
        self._model = model
        self._eval_fn = eval_fn
        self._config = config
        self._due: list[int] = sorted(due)
        self._queue: asyncio.Queue[int | None] = asyncio.Queue()
        self._on_change = on_change
        self._finished = asyncio.Event()
        self.last_step = last_step
        self.best = best
        self._evaluated = set(evaluated)

    @property
    def evaluated(self) -> tuple[int, ...]:
        """The steps whose evaluation finished (this run's and those the record carried)."""
        return tuple(sorted(self._evaluated))

    @property
    def due(self) -> tuple[int, ...]:
        return tuple(self._due)

    def steps_in_use(self) -> set[int]:
        """Steps retention must keep: those due, and the best evaluated one."""
        return set(self._due) | ({self.best[0]} if self.best is not None else set())

    async def settle(self) -> None:
        """Queue the steps a previous run left due, unless their marker shows they finished."""
        for step in list(self._due):
            if await has_value(self._model, step, DONE_KEY):
                self._due.remove(step)
            else:
                self._queue.put_nowait(step)

    def schedule(self, step: int) -> None:
        if step in self._due or step == self.last_step:
            return
        self._due.append(step)
        self.last_step = step
        self._queue.put_nowait(step)

    def step_done(self, step: int, every: int) -> None:
        if every > 0 and step - (self.last_step or 0) >= every:
            self.schedule(step)

    async def finish(self) -> None:
        """Run what is due, then stop."""
        self._queue.put_nowait(None)
        await self._finished.wait()

    async def run(self) -> None:
        while (step := await self._queue.get()) is not None:
            await self._evaluate(step)
        self._finished.set()

    async def _evaluate(self, step: int) -> None:
        started = time.monotonic()
        try:
            splits = eval_groups(await self._eval_fn(self._model, step, self._config))
            for split, groups in splits.items():
                if groups:
                    await self._model.log(groups, split=split, step=step)
            await self._model.log(
                None, split="val", step=step, metrics={DONE_KEY: time.monotonic() - started}
            )
        except Exception as error:  # an evaluation failing does not stop training (as ART)
            logger.warning("evaluating step %d of %s failed: %s", step, self._model.run, error)
        else:
            self._evaluated.add(step)
            rewards = [t.reward for g in splits.get("val", []) for t in g.trajectories]
            if rewards:
                mean = sum(rewards) / len(rewards)
                if self.best is None or mean >= self.best[1]:
                    self.best = (step, mean)
        self._due.remove(step)
        await self._on_change()
