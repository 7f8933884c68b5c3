"""`arthex view`: a local, live, read-only web viewer of the runs under one or more paths."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer

from ...core.errors import install_command
from .common import UsageError, fail, first_line, one_line_errors, option

VIEW_HINT = "To browse runs, their charts and trajectories in a web page: arthex view"


def view(
    paths: list[str] | None = typer.Argument(
        None,
        metavar="PATH",
        help="A base path (default .art), a project or model directory, or a URI such as "
        "s3://bucket/runs.",
        show_default=False,
    ),
    host: str = option(
        "HOST",
        "The address to listen on; any non-loopback one requires a token.",
        default="127.0.0.1",
    ),
    port: int = option(
        "PORT", "The port; 0 picks a free one.", default=8765, at_least=0, at_most=65535
    ),
    token: str | None = option(
        "TOKEN",
        "Require this token. Default: none on loopback, a generated one elsewhere.",
        shown=False,
    ),
) -> None:
    """Browse the runs under PATH in a live, read-only web page.

    Runs, metrics, trajectories and checkpoints; it never writes into a run directory.
    Prints the URL, then serves until Ctrl-C or SIGTERM."""
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401

        from ..view.serve import serve
    except ImportError as error:  # fastapi/uvicorn come with the `view` extra
        fail(f"arthex view needs the view extra: {install_command('view')} ({first_line(error)})")
    chosen = paths or [".art"]
    with one_line_errors():
        if token is not None and not token:
            raise UsageError("--token must not be empty")
        for path in chosen:
            if "://" not in path and not Path(path).is_dir():
                raise UsageError(
                    f"{path} is not a directory; pass a base path (.art), a project or model "
                    "directory, or a URI such as s3://bucket/runs"
                )
        serve(chosen, host, port, token)
    # A requested stop ends the process here: the viewer wrote nothing, and the interpreter's
    # teardown (the readers' thread pools winding down) took seconds under load.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
