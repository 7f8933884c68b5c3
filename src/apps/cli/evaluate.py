"""`arthex eval`: one step of a run evaluated on an environment, through `arthex.evaluate`.

The run is opened as a `Model` (a logger: no trainer lease, so a trainer may be training it
meanwhile) and its step served by a LocalBackend that trains nothing
(`Capability.SERVE_CHECKPOINT`). The environment comes from `--env MODULE:FACTORY`: the
factory is called with no arguments and returns an `Environment` (`_load_environment`).
"""

from __future__ import annotations

import asyncio
import importlib
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from ...adapters.layout import CHECKPOINTS, parse_run_dir, run_label
from ...core.environments import Environment
from ...core.errors import InvalidInputError
from .checkpoints import stored
from .common import (
    BASE_PATH_OPT,
    NAME_OPT,
    ONLY_ONE,
    PROJECT_OPT,
    UsageError,
    console,
    fmt,
    model_argument,
    one_line_errors,
    option,
    resolve_model,
)
from .tables import Column, print_table

if TYPE_CHECKING:
    from ...core.evaluation import EvaluationResult


def eval_command(
    model: str | None = model_argument(ONLY_ONE),
    env: str = option(
        "MODULE:FACTORY",
        "The environment: FACTORY() in MODULE (importable from here) returns it.",
        shown=False,
        default=...,
    ),
    step: int | None = option(
        "N", "The checkpoint step to evaluate. Default: the latest.", shown=False, at_least=0
    ),
    examples: int | None = option(
        "N", "Evaluate the split's first N examples. Default: all.", shown=False, at_least=1
    ),
    k: int = option(
        "K", "Rollouts per example; pass@1..pass@K are reported.", default=1, at_least=1
    ),
    split: str = option("NAME", "The split to evaluate.", default="val"),
    concurrency: int = option("N", "The most rollouts at once.", default=32, at_least=1),
    base_path: Path = BASE_PATH_OPT,
    project: str | None = PROJECT_OPT,
    name: str | None = NAME_OPT,
) -> None:
    """Evaluate a step on an environment: reward and pass@k.

    Rolls the split's examples out K times each against the step (served read-only: a
    trainer may be training the run meanwhile), then writes the trajectories under the
    split and one history row at that step: SPLIT/reward, the environment's metrics,
    SPLIT/pass@1..K (unbiased) and SPLIT/exception_rate. Prints the same numbers."""
    with one_line_errors():
        path = resolve_model(model, base_path, project, name, guess=False)
        located = parse_run_dir(path)
        if located is None:
            raise UsageError(f"{path} is not in the {{base}}/PROJECT/models/NAME layout")
        found = stored(path)
        if found.where != "run":
            where = "on the Tinker service" if found.where == "tinker" else "nowhere here"
            raise UsageError(
                f"{run_label(path)} has no checkpoints in {path / CHECKPOINTS} (they are "
                f"{where}); arthex eval serves a LocalBackend run's checkpoints"
            )
        environment = _load_environment(env)
        result = asyncio.run(
            _evaluate(located[0], located[1].project, located[1].name, environment,
                      step=step, examples=examples, k=k, split=split, concurrency=concurrency)
        )  # fmt: skip
    _print(run_label(path), result)


def _load_environment(spec: str) -> Environment[Any]:
    """The environment `--env MODULE:FACTORY` names: FACTORY() from MODULE, imported with the
    current directory on the path (as `python -m` would), an arthex Environment or a verifiers
    environment. UsageError naming what is wrong."""
    from ...environments import as_environment

    made = _call_factory(spec)
    try:  # an arthex Environment as is, a verifiers environment adapted
        return as_environment(made)
    except InvalidInputError as error:
        raise UsageError(f"--env {spec}: the factory returned the wrong kind: {error}") from None


def _call_factory(spec: str) -> object:
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"--env must be MODULE:FACTORY (e.g. my_envs:make_env), got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # ImportError, or the module failing as it runs
        raise UsageError(
            f"--env {spec}: cannot import {module_name!r}: {type(error).__name__}: {error}"
        ) from error
    factory = getattr(module, attr, None)
    if factory is None:
        raise UsageError(f"--env {spec}: module {module_name!r} has no {attr!r}")
    if not callable(factory):
        raise UsageError(f"--env {spec}: {attr!r} is a {type(factory).__name__}, not a factory")
    try:
        return factory()
    except Exception as error:
        raise UsageError(
            f"--env {spec}: the factory raised {type(error).__name__}: {error}"
        ) from error


async def _evaluate(
    base: Path,
    project: str,
    name: str,
    environment: Environment[Any],
    *,
    step: int | None,
    examples: int | None,
    k: int,
    split: str,
    concurrency: int,
) -> EvaluationResult:
    from ...composition.api import Model
    from ...composition.container import container
    from ...core.evaluation import evaluate

    model = Model(name=name, project=project, base_path=str(base))
    backend = container.backend("local")
    try:
        return await evaluate(
            model,
            environment,
            num_examples=examples,
            rollouts_per_example=k,
            split=split,
            step=step,
            max_concurrency=concurrency,
            backend=backend,
        )
    finally:
        await backend.close()
        await model.close()


def _print(label: str, result: EvaluationResult) -> None:
    split = result.split
    total = result.num_examples * result.rollouts_per_example
    typer.echo(
        f"{label} at step {result.step}, split {split}: {result.num_examples} examples x "
        f"{result.rollouts_per_example} rollouts"
    )
    # every number of the row written (the environment's own metrics too), the reward first
    first = f"{split}/reward"
    rows = [[first, fmt(result.reward)]]
    rows += [[key, fmt(value)] for key, value in result.row.items() if key != first]
    rows.append(["failures", f"{result.failures} of {total}"])
    rows.append(["time", f"{result.seconds:.1f}s"])
    print_table(console(), [Column("metric", "left"), Column("value")], rows)
