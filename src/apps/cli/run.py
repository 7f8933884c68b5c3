"""`arthex demo` and `arthex version` (also `arthex --version`)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import typer


def demo(
    base_path: Path = typer.Option(
        Path(".art"), "--base-path", metavar="DIR", help="Where runs are written."
    ),
    steps: int | None = typer.Option(
        None,
        min=3,
        metavar="N",
        help="Training steps. Default: the demo's own (20).",
        show_default=False,
    ),
    seed: int = typer.Option(0, metavar="SEED", help="Random seed."),
    pipeline: bool = typer.Option(
        False, "--pipeline", help="Sample the next steps' rollouts while a step trains."
    ),
) -> None:
    """Train the tiny model with RL on CPU; watch its reward rise.

    Prints one line per step of the history: the reward of the rollouts logged at step N,
    then the loss of the update that made step N+1 (or why it had nothing to train)."""
    from ..demo import run_demo

    kwargs: dict[str, Any] = {} if steps is None else {"steps": steps}
    asyncio.run(  # prints its summary
        run_demo(base_path=str(base_path), seed=seed, pipeline=pipeline, **kwargs)
    )


def print_version() -> None:
    from ... import __version__

    typer.echo(__version__)


def version() -> None:
    """Print the installed version."""
    print_version()
