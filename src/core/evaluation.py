"""`evaluate`: an environment's examples rolled out against one step of a model, scored by
the environment's own rules, and logged like any other split.

The step: with a backend that serves checkpoints (`Capability.SERVE_CHECKPOINT`) every
rollout goes to `{name}@{step}` of the step asked for (the latest checkpoint when None), kept
from deletion while the evaluation runs; the backend is the one given, else the one a
trainable model is registered on. Without one, step=None evaluates the model as it is: a
trainable model at its current step, a prompted model at step 0. Serving a checkpoint takes
no run lease, so an evaluator runs beside the process that trains the run.

The numbers: each example is rolled out `rollouts_per_example` times (at most
`max_concurrency` rollouts at once) and logged as one group at the evaluated step through
`model.log`: the trajectories in the split's store, and one history row with `{split}/reward`
(the mean over the rollouts that finished), `{split}/exception_rate`, the environment's own
metrics (`{split}/{metric}`, means) and `{split}/pass@{k}` for k = 1..n, the unbiased
estimator 1 - C(n-c, k) / C(n, k) per example (c: rollouts with reward >= `pass_threshold`;
a failed rollout counts as incorrect), averaged over the examples.

Failures are counted, ART's way (the row's exception rate), and do not stop the evaluation:
a failed rollout is kept as its group's exception entry. `max_exceptions` (a count, or a
fraction of all rollouts, as in `gather_trajectory_groups`) raises TooManyExceptionsError
past it instead, before anything is logged; so does an evaluation whose every rollout failed,
which measured nothing (no row that could make a step look best or worst).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, TypeVar

import attrs

from ..ports.training_backend import (
    Capability,
    CheckpointServing,
    TrainingBackend,
    checkpoint_server,
)
from .capture.endpoints import register_endpoint
from .environments import Environment
from .errors import InvalidInputError, NotRegisteredError, TooManyExceptionsError
from .gather import check_budget, first_error, too_many
from .identity import ModelSpec, validate_name
from .model import Model
from .progress import ProgressLine
from .trainable import TrainableModel
from .trajectories import Trajectory, TrajectoryGroup

ScenarioT = TypeVar("ScenarioT")

DEFAULT_MAX_CONCURRENCY = 32


@attrs.frozen
class EvaluationResult:
    """What one `evaluate` measured and logged.

    `reward`: the mean reward of the rollouts that finished (the row's `{split}/reward`);
    `pass_at_k`: k -> the unbiased pass@k averaged over the examples, k = 1..n;
    `rollout_rewards`: per example, each rollout's reward in order (None: it failed);
    `example_rewards`: per example, the mean reward of its finished rollouts (None: all
    failed); `failures`: rollouts that raised; `row`: the history row written."""

    split: str
    step: int
    num_examples: int
    rollouts_per_example: int
    reward: float
    pass_at_k: Mapping[int, float]
    rollout_rewards: tuple[tuple[float | None, ...], ...]
    failures: int
    seconds: float
    row: Mapping[str, float | None]

    @property
    def example_rewards(self) -> tuple[float | None, ...]:
        return tuple(
            math.fsum(done) / len(done) if (done := [r for r in rewards if r is not None]) else None
            for rewards in self.rollout_rewards
        )

    @property
    def exception_rate(self) -> float:
        return self.failures / (self.num_examples * self.rollouts_per_example)


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimate of the chance that k of n rollouts, c of them correct, hold at
    least one correct one: 1 - C(n-c, k) / C(n, k)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise InvalidInputError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got {n=} {c=} {k=}")
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def mean_pass_at_k(
    rollout_rewards: Sequence[Sequence[float | None]], threshold: float
) -> dict[int, float]:
    """pass@k for k = 1..n, averaged over the examples (each with n rollouts)."""
    n = len(rollout_rewards[0])
    correct = [
        sum(r is not None and r >= threshold for r in rewards) for rewards in rollout_rewards
    ]
    return {
        k: math.fsum(pass_at_k(n, c, k) for c in correct) / len(correct) for k in range(1, n + 1)
    }


class _AtStep(Model):
    """The model as an environment sees it during an evaluation: the same run, the endpoint
    serving the evaluated step and that step's name (`{name}@{step}`). It shares the
    evaluated model's ports and closes only its own client."""

    def __init__(
        self, model: Model, step: int, base_url: str, api_key: str, model_name: str
    ) -> None:
        super().__init__(
            name=model.name,
            project=model.project,
            ports=model.ports,
            base_path=model.base_path,
            config=model.config,
            run_name=model.run_name,
            inference_base_url=base_url,
            inference_api_key=api_key,
            inference_model_name=model_name,
        )
        self._at = step

    async def get_step(self) -> int:
        return self._at

    async def close(self) -> None:
        await self._close_client()


async def evaluate(
    model: Model,
    environment: Environment[ScenarioT],
    *,
    num_examples: int | None = None,
    rollouts_per_example: int = 1,
    split: str = "val",
    step: int | None = None,
    pass_threshold: float = 1.0,
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
    max_exceptions: int | float | None = None,
    backend: TrainingBackend | None = None,
    progress: bool | None = None,
) -> EvaluationResult:
    """Roll out the first `num_examples` of `environment.scenarios(split)` (all when None)
    `rollouts_per_example` times each against `step` of the model (see the module's notes),
    log them under `split` at that step, and return what was measured. `backend` serves the
    step for a model that is not registered on one (a `Model` of a run another process
    trains). Bad arguments raise InvalidInputError before anything runs."""
    scenarios = _checked(
        environment,
        num_examples=num_examples,
        rollouts_per_example=rollouts_per_example,
        split=split,
        step=step,
        pass_threshold=pass_threshold,
        max_concurrency=max_concurrency,
        max_exceptions=max_exceptions,
    )
    started = time.monotonic()
    async with _served(model, step, backend) as (target, at):
        outcomes = await _roll_out(
            target, environment, scenarios, rollouts_per_example, max_concurrency, progress
        )
    groups = [
        TrajectoryGroup(
            [o for o in mine if isinstance(o, Trajectory)],
            exceptions=[o for o in mine if isinstance(o, BaseException)],
        )
        for mine in outcomes
    ]
    rollout_rewards = tuple(
        tuple(o.reward if isinstance(o, Trajectory) else None for o in mine) for mine in outcomes
    )
    failures = sum(len(group.exceptions) for group in groups)
    total = len(scenarios) * rollouts_per_example
    indexed = dict(enumerate(groups))
    if failures == total:
        raise TooManyExceptionsError(
            f"every one of the {total} rollouts failed, nothing measured and nothing logged; "
            f"first: {first_error(indexed)}"
        )
    if max_exceptions is not None and too_many(failures, total, max_exceptions):
        raise TooManyExceptionsError(
            f"{failures} of {total} rollouts failed, more than max_exceptions={max_exceptions}; "
            f"nothing logged; first: {first_error(indexed)}"
        )
    passes = mean_pass_at_k(rollout_rewards, pass_threshold)
    row = await model.log(
        groups, split, metrics={f"pass@{k}": value for k, value in passes.items()}, step=at
    )
    assert row is not None  # groups with at least one trajectory always make a row
    reward = row.values[f"{split}/reward"]
    assert reward is not None
    return EvaluationResult(
        split=split,
        step=at,
        num_examples=len(scenarios),
        rollouts_per_example=rollouts_per_example,
        reward=reward,
        pass_at_k=passes,
        rollout_rewards=rollout_rewards,
        failures=failures,
        seconds=time.monotonic() - started,
        row=dict(row.values),
    )


def _checked(
    environment: Environment[ScenarioT],
    *,
    num_examples: int | None,
    rollouts_per_example: int,
    split: str,
    step: int | None,
    pass_threshold: float,
    max_concurrency: int,
    max_exceptions: int | float | None,
) -> list[ScenarioT]:
    validate_name(split, "split")
    for what, value, least in (
        ("num_examples", num_examples, 1),
        ("rollouts_per_example", rollouts_per_example, 1),
        ("max_concurrency", max_concurrency, 1),
        ("step", step, 0),
    ):
        if value is None and what in ("num_examples", "step"):
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise InvalidInputError(f"{what} must be an integer >= {least}, got {value!r}")
    if (
        isinstance(pass_threshold, bool)
        or not isinstance(pass_threshold, int | float)
        or not math.isfinite(pass_threshold)
    ):
        raise InvalidInputError(f"pass_threshold must be a finite number, got {pass_threshold!r}")
    if max_exceptions is not None:
        check_budget(max_exceptions)
    if not isinstance(environment, Environment):
        raise InvalidInputError(
            f"{type(environment).__name__} is not an Environment: it needs scenarios(split) "
            "and async rollout(model, scenario)"
        )
    scenarios = list(environment.scenarios(split))
    if not scenarios:
        raise InvalidInputError(
            f"{type(environment).__name__} offers no examples for split {split!r}"
        )
    return scenarios if num_examples is None else scenarios[:num_examples]


def _backend_of(model: Model, given: TrainingBackend | None) -> TrainingBackend | None:
    if given is not None or not isinstance(model, TrainableModel):
        return given
    try:
        return model.backend
    except NotRegisteredError:
        return None


async def _spec_of(model: Model) -> ModelSpec:
    """What a backend needs to serve the run's checkpoints: the trainable model's own spec,
    or, for a `Model` of a trained run, the base model its card (`model.json`) records."""
    if isinstance(model, TrainableModel):
        return model.spec()
    recorded = await model.ports.store.read_model_spec(model.run)
    base = recorded.get("base_model") if recorded is not None else None
    if not isinstance(base, str) or not base:
        raise InvalidInputError(
            f"{model.run} records no base model (model.json): it has no checkpoints to serve"
        )
    return ModelSpec(run=model.run, base_model=base, trainable=True, base_path=model.base_path)


@contextlib.asynccontextmanager
async def _served(
    model: Model, step: int | None, given: TrainingBackend | None
) -> AsyncIterator[tuple[Model, int]]:
    """The model to roll out against, serving the evaluated step, and that step."""
    backend = _backend_of(model, given)
    if backend is not None and Capability.SERVE_CHECKPOINT in backend.capabilities:
        server: CheckpointServing = checkpoint_server(backend)
        async with server.serve_checkpoint(await _spec_of(model), step) as served:
            register_endpoint(served.endpoint.base_url)  # capture scopes watch it too
            target = _AtStep(
                model,
                served.step,
                served.endpoint.base_url,
                served.endpoint.api_key,
                served.model_name,
            )
            try:
                yield target, served.step
            finally:
                await target.close()
        return
    if step is not None:
        if backend is None:
            raise InvalidInputError(
                f"evaluating step {step} of {model.run} needs a backend that serves its "
                "checkpoints: pass backend= (e.g. LocalBackend()) or register the model"
            )
        checkpoint_server(backend)  # raises UnsupportedCapability naming the backend
    if isinstance(model, TrainableModel):
        at = await model.get_step()
        base_url, api_key = model.inference_base_url, model.inference_api_key
        if base_url is None or api_key is None:
            raise InvalidInputError(
                f"{type(model.backend).__name__} serves no endpoint for {model.run}: "
                "nothing to evaluate against"
            )
        target = _AtStep(model, at, base_url, api_key, model.get_inference_name(at))
        try:
            yield target, at
        finally:
            await target.close()
        return
    yield model, await model.get_step()


async def _roll_out(
    model: Model,
    environment: Environment[ScenarioT],
    scenarios: Sequence[ScenarioT],
    n: int,
    max_concurrency: int,
    progress: bool | None,
) -> list[list[Trajectory | BaseException]]:
    """Every rollout, at most `max_concurrency` at once: per example, its `n` outcomes in
    order (a Trajectory, or the exception its rollout raised)."""
    limit = asyncio.Semaphore(max_concurrency)
    bar = ProgressLine(f"evaluate {model.run}", len(scenarios) * n, enabled=progress)

    async def one(scenario: ScenarioT) -> Trajectory | BaseException:
        async with limit:
            try:
                outcome: Any = await environment.rollout(model, scenario)
                if not isinstance(outcome, Trajectory):
                    raise TypeError(
                        f"{type(environment).__name__}.rollout returned "
                        f"{type(outcome).__name__}, not a Trajectory"
                    )
            except Exception as error:
                bar.advance(1, 1)
                return error
            bar.advance(1)
            return outcome

    try:
        outcomes = await asyncio.gather(*(one(s) for s in scenarios for _ in range(n)))
    finally:
        bar.close()
    return [list(outcomes[i * n : (i + 1) * n]) for i in range(len(scenarios))]
