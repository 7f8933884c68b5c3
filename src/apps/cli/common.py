"""What every command shares: how a model is named on the command line, one-line errors, and
how values are shown.

Commands that look at a run take the model the same way: a model directory
(`arthex plot .art/demo/models/digits-1`), `PROJECT/NAME` under `--base-path`
(`arthex plot demo/digits-1`), `--project P --name N`, or nothing, which picks the most
recently updated model under `--base-path` (`prune` takes the only one, never a guess among
several). A wrong path, a model without history and similar mistakes end with one line on
stderr and exit code 2; a damaged file or another arthex error with exit code 1.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import shlex
import shutil
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import typer

from ...adapters.layout import MARKERS, RunLayout, find_runs, is_run_dir, run_label
from ...core.errors import ArthexError, InvalidInputError
from ...core.identity import RunRef

if TYPE_CHECKING:
    from rich.console import Console

GUESSED = "Default: the most recently updated model under --base-path."
ONLY_ONE = "Default: the only model under --base-path; with several, name one (never a guess)."
MODEL_HELP = "A model directory, or PROJECT/NAME under --base-path."


def model_argument(default_help: str = GUESSED) -> Any:
    return typer.Argument(
        None, metavar="MODEL", help=f"{MODEL_HELP} {default_help}", show_default=False
    )


MODEL_ARG = model_argument()


def option(
    metavar: str,
    description: str,
    *names: str,
    shown: bool = True,
    default: Any = None,
    at_least: int | None = None,
    at_most: int | None = None,
) -> Any:
    """An option: `--name METAVAR  description`, defaulting to `default`; `shown=False` keeps
    the default out of the help (where it is set elsewhere, or says nothing). `at_least` and
    `at_most` bound a number (Click refuses one outside, naming the range)."""
    return typer.Option(
        default,
        *names,
        metavar=metavar,
        help=description,
        show_default=shown,
        min=at_least,
        max=at_most,
    )


BASE_PATH_OPT = typer.Option(Path(".art"), "--base-path", metavar="DIR", help="Where runs live.")
PROJECT_OPT = typer.Option(
    None, "--project", metavar="PROJECT", help="The model's project (with --name)."
)
NAME_OPT = typer.Option(None, "--name", metavar="NAME", help="The model's name (with --project).")
DIRECTION_OPT = typer.Option(
    "max", "--direction", metavar="max|min", help="max (higher is better) or min (e.g. a loss)."
)


class UsageError(ArthexError):
    """A mistake on the command line: reported as one line, exit code 2."""


def fail(message: str, code: int = 2) -> NoReturn:
    typer.echo(f"arthex: error: {message}", err=True)
    raise typer.Exit(code)


@contextlib.contextmanager
def one_line_errors() -> Iterator[None]:
    """Input mistakes exit 2, damaged files and other arthex errors exit 1; both as one line
    that names the thing, instead of a traceback."""
    try:
        yield
    except (UsageError, InvalidInputError) as error:
        fail(first_line(error))
    except ArthexError as error:
        fail(first_line(error), code=1)


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def check_direction(direction: str) -> None:
    if direction not in ("max", "min"):
        raise UsageError(f"--direction must be max or min, got {direction!r}")


# --- naming a model ---------------------------------------------------------------------------


def updated_at(model: Path) -> float:
    times = [(model / marker).stat().st_mtime for marker in MARKERS if (model / marker).exists()]
    return max(times, default=model.stat().st_mtime)


def resolve_model(
    model: str | None,
    base_path: Path,
    project: str | None,
    name: str | None,
    *,
    guess: bool = True,
) -> Path:
    """The model directory the command line names; UsageError with what to do otherwise."""
    if (project is None) != (name is None):
        raise UsageError("pass both --project and --name, or neither")
    if project is not None and name is not None:
        if model is not None:
            raise UsageError("pass either MODEL or --project/--name, not both")
        path = RunLayout.of(base_path, RunRef(project=project, name=name)).dir
        if not is_run_dir(path):
            raise UsageError(f"no model {project}/{name} under {base_path} ({path} not found)")
        return path
    if model is not None:
        return _named(model, base_path)
    found = find_runs(base_path)
    if not found:
        raise UsageError(no_models(base_path))
    if len(found) == 1:
        return found[0]
    if not guess:
        names = ", ".join(run_label(p) for p in found[:5]) + (", ..." if len(found) > 5 else "")
        raise UsageError(f"{len(found)} models under {base_path} ({names}): name one")
    chosen = max(found, key=updated_at)
    typer.echo(
        f"using {run_label(chosen)}, the most recently updated of {len(found)} models under "
        f"{base_path} (pass MODEL to choose)",
        err=True,
    )
    return chosen


def no_models(base_path: Path) -> str:
    """What every command says of a base path without models, and what to do."""
    return (
        f"no models under {base_path}; train one (e.g. `{arthex_command()} demo`), or pass "
        "--base-path where runs live or a model directory"
    )


def _named(model: str, base_path: Path) -> Path:
    path = Path(model)
    if path.is_dir():
        if not is_run_dir(path):
            below = [str(p.relative_to(path)) for p in find_runs(path)]
            hint = f"; models below it: {', '.join(below[:5])}" if below else ""
            markers = ", ".join(MARKERS)
            raise UsageError(f"{model} is not a model directory (none of {markers} in it){hint}")
        return path
    parts = model.split("/")
    if len(parts) == 2 and all(parts):
        with contextlib.suppress(InvalidInputError):  # not names: not this form
            candidate = RunLayout.of(base_path, RunRef(project=parts[0], name=parts[1])).dir
            if is_run_dir(candidate):
                return candidate
        from .server_runs import named_on_server

        try:
            on_server = named_on_server(base_path, model)
        except InvalidInputError as error:
            raise UsageError(str(error)) from None
        if on_server is not None and is_run_dir(on_server):
            return on_server
    raise UsageError(
        f"no model directory {model!r}; pass a path like "
        f"{base_path}/PROJECT/models/NAME or PROJECT/NAME under --base-path"
    )


def view_hint(where: Path) -> None:
    """One line on stderr after a table: the same data, live, in `arthex view`."""
    typer.echo(f"see it live in a browser: {arthex_command()} view {where}", err=True)


def _entry_point() -> Path | None:
    """The `arthex` script running now (or, under `python -m`, the one beside the
    interpreter), when there is one."""
    ran = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    script = ran if ran is not None and ran.name == "arthex" else None
    if script is None:
        script = Path(sys.executable).parent / "arthex"
    return script if script.is_file() else None


@functools.cache
def arthex_command() -> str:
    """`arthex` as the user can type it: the bare name when PATH finds this very program,
    else the entry point's own path (`.venv/bin/arthex` from the checkout), which works before
    its venv is activated."""
    script = _entry_point()
    if script is None:
        return "arthex"
    found = shutil.which("arthex")
    if found is not None and Path(found).resolve() == script.resolve():
        return "arthex"
    absolute = script.absolute()
    with contextlib.suppress(ValueError):
        return shlex.quote(str(absolute.relative_to(Path.cwd())))
    return shlex.quote(str(absolute))


def activate_hint() -> str | None:
    """How to make the bare `arthex` work, when it does not yet: activate its venv."""
    if arthex_command() == "arthex":
        return None
    script = _entry_point()
    activate = script.parent / "activate" if script is not None else None
    if activate is None or not activate.is_file():
        return None
    shown = shlex.quote(str(Path(arthex_command()).parent / "activate"))
    return f"to type plain `arthex`, activate its environment first: source {shown}"


# --- showing values ---------------------------------------------------------------------------


def console() -> Console:
    from rich.console import Console

    # Piped output has no width; a wide virtual one keeps tables whole instead of eliding.
    wide = not sys.stdout.isatty() and "COLUMNS" not in os.environ
    # markup=False: paths, keys and model output are printed as they are, never as markup.
    return Console(highlight=False, markup=False, width=240 if wide else None, soft_wrap=False)


def fmt(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        if math.isnan(value):
            return ""
        return f"{value:.4g}"
    return str(value)


def local_time(value: Any, layout: str = "%Y-%m-%d %H:%M:%S") -> str:
    """A recorded time (UTC) as this machine's wall-clock time, as ART users read it."""
    return str(value.astimezone().strftime(layout))


def abbreviate(steps: Sequence[int]) -> str:
    if len(steps) <= 12:
        return ", ".join(map(str, steps))
    return f"{', '.join(map(str, steps[:5]))}, ..., {', '.join(map(str, steps[-5:]))}"


def size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if value < 1024 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")
