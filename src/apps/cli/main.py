"""The `arthex` command: the app, built from one module per command group.

    arthex demo | version | history | plot | trajectories | runs | prune | export | eval | view
    | serve | doctor | migrate | init | install-skills

Each command imports what it needs (polars, matplotlib, rich, the server) inside its body,
so `arthex --help` stays quick. common.py holds how commands name a model and report
mistakes; conventions.py how every command parses, helps and fails.
"""

from __future__ import annotations

from typing import Any

import typer

from . import (
    doctor,
    evaluate,
    history,
    migrate,
    plot,
    prune,
    run,
    runs,
    serve,
    skills,
    trajectories,
    view,
)
from .conventions import CONTEXT, PLAIN, Command, Group, LazyCommand


class ArthexGroup(Group):
    """The `arthex` group: the typer app's commands plus `serve`, whose options load when it
    runs, so `app()` and `command()` are the whole command line."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.add_command(LazyCommand("serve", serve.serve.__doc__ or "", serve.command))


app = typer.Typer(
    cls=ArthexGroup,
    no_args_is_help=True,
    add_completion=False,
    context_settings=CONTEXT,
    rich_markup_mode=PLAIN,
)


def _version(value: bool) -> None:
    if value:
        run.print_version()
        raise typer.Exit()


@app.callback()
def arthex(
    version: bool = typer.Option(
        False, "--version", is_eager=True, callback=_version, help="Print the version and exit."
    ),
) -> None:
    """arthex: train LLM agents with RL from their own rollouts.

    Every step a command prints is the history's step: the rollouts logged at step N were
    sampled from checkpoint N, and training on them makes step N+1. `arthex COMMAND -h`
    explains a command."""


app.command(cls=Command)(run.demo)
app.command(cls=Command)(run.version)
app.command(cls=Command)(history.history)
app.command(cls=Command)(plot.plot)
app.command(cls=Command)(trajectories.trajectories)
app.command(cls=Command)(runs.runs)
app.command(cls=Command)(prune.prune)
app.command(cls=Command)(run.export)
app.command(name="eval", cls=Command)(evaluate.eval_command)
app.command(cls=Command)(view.view)
app.command(cls=Command)(doctor.doctor)
app.command(cls=Command)(migrate.migrate)
app.command(cls=Command)(skills.init)
# ART's other name for init: it runs, and stays out of the listing (its width would cut the
# other summaries in 80 columns)
app.command(name="install-skills", cls=Command, hidden=True)(skills.install_skills)


def command() -> Any:
    """The click group of the typer app (`serve` included)."""
    return typer.main.get_command(app)


def main() -> None:
    command()(prog_name="arthex")


if __name__ == "__main__":
    main()
