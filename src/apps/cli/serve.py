"""`arthex serve`: the training server's command line, the one definition of its options.

`python -m arthex.apps.server` runs this same command (`run_standalone`). The general options
are written out below; the limit options come from `ServerLimits`' bounds
(`arthex.apps.server.limits.BOUNDS`: field, bounds, option name) and their help from
`LIMIT_HELP`, so a limit is declared once, where it is checked. The values become a
`ServeOptions`, checked as a whole (a bad one: one line, exit 2, nothing created), and the
server's `run` serves it.
"""

from __future__ import annotations

import copy
import functools
import inspect
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import typer

from .common import one_line_errors, option
from .conventions import CONTEXT, PLAIN, Command, exits

if TYPE_CHECKING:
    from ..server.options import ServeOptions


def _parser(check: Callable[[str], Any]) -> Callable[[str], Any]:
    """A typer value parser from one of the server's checks (typer also passes it the
    defaults, which are values already): its error becomes the parser's one-line error naming
    the option."""

    def parse(text: Any) -> Any:
        from ...core.errors import InvalidInputError

        if not isinstance(text, str):
            return text  # a default, already a value
        try:
            return check(text)
        except InvalidInputError as error:
            raise typer.BadParameter(str(error)) from None

    return parse


def _general(
    backend: str = option(
        "NAME", "local, inmemory, an arthex.backends entry point, or module:callable (a factory)."
    ),
    host: str = option("HOST", "The interface to listen on (loopback by default)."),
    port: int | None = option(
        "PORT",
        "The port: 8000, or ART's 7999 with --protocol art; 0 picks a free one.",
        shown=False,
    ),
    protocol: str = option(
        "arthex|art|tinker",
        "arthex: the hosted API for ServerlessBackend. art: ART's remote-backend API "
        "(`art run`'s), for ART 0.5.17 clients such as NVIDIA NeMo Agent Toolkit's. "
        "tinker: the Tinker API, for the tinker SDK (docs/backends/tinker-server.md).",
    ),
    inference_port: int | None = option(
        "PORT",
        "--protocol art: the OpenAI-compatible inference server's port (ART's 8000).",
        shown=False,
    ),
    base_path: str | None = option(
        "DIR", "--protocol art: where runs and checkpoints live (ART's .art).", shown=False
    ),
    insecure_bind: bool = typer.Option(
        None,
        "--insecure-bind",
        help="--protocol art: listen on a non-loopback --host (ART's API has no keys).",
    ),
    keys: str | None = option(
        "FILE",
        "The tenants' API keys file. Default: the ARTHEX_SERVER_KEYS variable; with "
        "--protocol art, none (the API is open on loopback).",
        shown=False,
    ),
    state_dir: str = option("DIR", "Where the registry, jobs and checkpoints live."),
    allow_base_model: list[str] | None = typer.Option(
        None,
        metavar="MODEL",
        help="A base model tenants may register (repeat for more). Default: any.",
        show_default=False,
    ),
    base_model: list[str] | None = typer.Option(
        None,
        metavar="MODEL",
        help="--protocol tinker: a model folder or a hub id in the local cache, served under "
        "that name (repeat for more).",
        show_default=False,
    ),
    log_level: str = option("LEVEL", "critical, error, warning, info, debug or trace."),
    admin_keys: str | None = option(
        "FILE",
        "Keys for GET /metrics. Default: the ARTHEX_SERVER_ADMIN_KEYS variable; "
        "none: /metrics is closed.",
        shown=False,
    ),
    audit_log: str | None = option(
        "FILE|off",
        "The JSON-lines audit log. Default: audit.jsonl in --state-dir; off: none.",
        shown=False,
    ),
    audit_max_bytes: int = option("BYTES", "Rotate the audit log at this size."),
    audit_backups: int = option("N", "How many rotated audit logs to keep."),
) -> None:
    """The general options. Their defaults are ServeOptions', filled in by `_signature`, so
    the settings hold the only copy."""


def _signature() -> inspect.Signature:
    """`_general`'s options with ServeOptions' defaults and the server's value checks, then one
    option per limit."""
    from ..server import options
    from ..server.limits import BOUNDS

    defaults = options.ServeOptions()
    checks: dict[str, Callable[[str], Any]] = {
        "port": options.port,
        "inference_port": options.port,
        "audit_max_bytes": options.integer,
        "audit_backups": options.integer,
    }
    parameters = []
    for name, parameter in inspect.signature(_general, eval_str=True).parameters.items():
        info = copy.copy(parameter.default)
        info.default = getattr(defaults, name)
        if name in checks:
            info.parser = _parser(checks[name])
        parameters.append(parameter.replace(default=info))
    for field, (_low, _high, flag) in BOUNDS.items():
        default = getattr(defaults.limits, field)
        whole = isinstance(default, int)
        info = typer.Option(
            default,
            flag,
            metavar="N" if whole else "NUMBER",
            help=options.LIMIT_HELP[field][:1].upper() + options.LIMIT_HELP[field][1:] + ".",
            parser=_parser(options.integer if whole else options.number),
        )
        parameters.append(
            inspect.Parameter(
                field,
                inspect.Parameter.KEYWORD_ONLY,
                default=info,
                annotation=int if whole else float,
            )
        )
    return inspect.Signature(parameters, return_annotation=None)


def parse_values(values: dict[str, Any]) -> ServeOptions:
    """The checked ServeOptions of the command line's values; InvalidInputError naming the
    option of a bad one."""
    from ..server.limits import BOUNDS, ServerLimits
    from ..server.options import ServeOptions, check_paths

    limits = ServerLimits(**{field: values.pop(field) for field in BOUNDS})
    allowed = values.pop("allow_base_model")
    served = values.pop("base_model")
    options = ServeOptions(
        **values,
        allow_base_model=tuple(allowed) if allowed else None,
        base_model=tuple(served) if served else None,
        limits=limits,
    )
    check_paths(options)
    return options


def serve(**values: Any) -> None:
    """Serve a backend over HTTP to ServerlessBackend, ART or NAT.

    For ServerlessBackend clients, or with --protocol art for ART 0.5.17's clients (NVIDIA NeMo
    Agent Toolkit's adapter): docs/backends/nat.md.

    Every option is checked before anything starts or is created. The server runs until
    interrupted (Ctrl-C or SIGTERM) and prints its URL once it listens."""
    from ..server.main import run

    with one_line_errors():
        options = parse_values(dict(values))
    run(options)


def parse(argv: Sequence[str]) -> ServeOptions:
    """Parse and check a command line as `arthex serve` does, without serving: the
    ServeOptions, or one line on stderr and SystemExit(2)."""
    with exits():
        context = command().make_context("arthex serve", list(argv))
        with one_line_errors():
            return parse_values(dict(context.params))


@functools.cache
def _app() -> typer.Typer:
    # The options are built here, not at import: the server's modules take seconds to import,
    # and `arthex --help` or `arthex history` should not wait for them.
    serve.__signature__ = _signature()  # type: ignore[attr-defined]
    app = typer.Typer(add_completion=False, context_settings=CONTEXT, rich_markup_mode=PLAIN)
    app.command(cls=Command, context_settings=CONTEXT)(serve)
    return app


def command() -> Any:
    """The `arthex serve` click command, its options built now."""
    return typer.main.get_command(_app())


def run_standalone(argv: Sequence[str] | None = None) -> None:
    """`python -m arthex.apps.server [OPTIONS]`: this command on its own."""
    _app()(argv, prog_name="python -m arthex.apps.server")
