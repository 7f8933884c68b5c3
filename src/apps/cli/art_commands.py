"""ART's `art run` and `art help` as arthex functions, for scripts that call them.

`run(host, port)` serves ART's remote-backend API, as `art run` does: it is
`arthex serve --protocol art --host HOST --port PORT` (the LocalBackend, runs under `.art`,
inference on port 8000, as ART's). Unlike ART's, it listens on loopback by default: the API
has no keys, so a non-loopback host is refused in one line (`arthex serve --protocol art
--insecure-bind` opens it on purpose). `help_command()` prints the `arthex` command's help.
"""

from __future__ import annotations

ART_API_PORT = 7999
ART_INFERENCE_PORT = 8000


def run(
    host: str = "127.0.0.1",
    port: int = ART_API_PORT,
    *,
    inference_port: int = ART_INFERENCE_PORT,
    base_path: str = ".art",
) -> None:
    """Serve ART's remote-backend API on `host:port` until SIGINT/SIGTERM (`arthex serve
    --protocol art`). A bad option, or a non-loopback host, exits 2 with one line; a port
    already taken exits 1 with one line."""
    from ..server.main import run as serve
    from .serve import parse

    argv = ["--protocol", "art", "--host", host, "--port", str(port)]
    argv += ["--inference-port", str(inference_port), "--base-path", base_path]
    serve(parse(argv))


def help_command() -> None:
    """Print the `arthex` command's help: its commands and what each does."""
    from .main import command

    command().main(["--help"], prog_name="arthex", standalone_mode=False)
