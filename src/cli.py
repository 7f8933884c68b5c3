"""The `arthex` command."""

from __future__ import annotations

import asyncio
from pathlib import Path

import typer

app = typer.Typer(
    help="arthex: train LLM agents with RL from their own rollouts.",
    no_args_is_help=True,
    add_completion=False,
)


@app.command()
def demo(
    base_path: Path = typer.Option(Path(".art"), help="Where runs are written."),
    steps: int | None = typer.Option(None, help="Training steps (default: the demo's own)."),
    seed: int = typer.Option(0, help="Random seed."),
) -> None:
    """Train the tiny local model with RL on CPU and show its reward improve."""
    from .demo import run_demo

    kwargs = {} if steps is None else {"steps": steps}
    result = asyncio.run(run_demo(base_path=str(base_path), seed=seed, **kwargs))
    typer.echo(
        f"first step reward: {result.first_reward:.3f}  "
        f"mean of the last three steps: {result.last3_mean:.3f}"
    )


@app.command()
def version() -> None:
    """Print the installed version."""
    from . import __version__

    typer.echo(__version__)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
