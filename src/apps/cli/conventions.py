"""How every arthex command behaves as a command line, in one place.

- `-h` and `--help` both print help; help is click's plain layout (it rewraps to the terminal,
  80 columns included) with a name for every value (`--base-path DIR`, `--pin STEP`), never a
  Python type such as `<bool>` or `<list[int]>`, which typer's rich layout prints.
- A mistake the parser catches (an unknown option, a value out of range) ends with one line
  on stderr and exit code 2, like the commands' own checks, instead of a usage block.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup

CONTEXT: dict[str, Any] = {"help_option_names": ["-h", "--help"]}
PLAIN: Any = None  # typer's rich_markup_mode for click's plain help layout

# The parser's error class: typer re-exports only its subclass BadParameter, and the base
# lives in `click` or, from typer 0.29, in typer's own copy of it.
_PARSER_ERROR: type[Exception] = next(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException"
)


def lower_case(message: str) -> str:
    """Click's sentence ("Missing option '--out'.") in arthex's own style: lower case, no
    final period ("missing option '--out'")."""
    message = message.strip().removesuffix(".")
    return message[:1].lower() + message[1:]


@contextlib.contextmanager
def exits() -> Iterator[None]:
    """What click's standalone mode does with an error, but a parser error is one line: exit
    with its code (2), a typer.Exit with its own."""
    try:
        yield
    except _PARSER_ERROR as error:
        context = getattr(error, "ctx", None)
        hint = ""
        if context is not None:
            from .common import arthex_command  # the command as the user can type it

            path = context.command_path.split(" ", 1)
            hint = f" (see {' '.join([arthex_command(), *path[1:]])} -h)"
        message = lower_case(error.format_message())  # type: ignore[attr-defined]
        typer.echo(f"arthex: error: {message}{hint}", err=True)
        sys.exit(getattr(error, "exit_code", 2))
    except typer.Exit as stop:
        sys.exit(stop.exit_code)
    except typer.Abort:
        typer.echo("arthex: aborted", err=True)
        sys.exit(1)


class OneLineErrors:
    """Run as a program (`main`), a parser error is one line on stderr (exit 2) and the exit
    code the command's, as click's standalone mode would do but for the usage block. Mixed
    into the group and into a command run on its own."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        run: Callable[..., Any] = super().main  # type: ignore[misc]
        extra.update(complete_var=complete_var, windows_expand_args=windows_expand_args)
        if not standalone_mode:
            return run(args, prog_name, standalone_mode=False, **extra)
        with exits():
            code = run(args, prog_name, standalone_mode=False, **extra)
        sys.exit(code if isinstance(code, int) else 0)


def _no_type(ctx: Any = None) -> None:
    return None


class Group(OneLineErrors, TyperGroup):
    """The `arthex` group."""


class Command(OneLineErrors, TyperCommand):
    """An arthex command. Its arguments show their name only: typer prints a Python type
    beside an argument's name (`MODEL <str>`) whatever its metavar."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            if isinstance(param, TyperArgument) and param.metavar is not None:
                setattr(param, "display_type_rich", _no_type)  # noqa: B010 (a method, per object)


class LazyCommand(TyperCommand):
    """A subcommand whose options are built when it runs or shows its help, and listed in the
    group's help by a fixed line meanwhile: for a command whose modules take seconds to import
    (`serve`), so the other commands do not wait for them."""

    def __init__(self, name: str, help: str, load: Callable[[], Any]) -> None:
        super().__init__(name=name, callback=None, help=help, add_help_option=False)
        self._load = load

    def make_context(
        self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any
    ) -> Any:
        return self._load().make_context(info_name, args, parent=parent, **extra)
