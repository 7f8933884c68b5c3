"""ART's `art.cli`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.apps.cli.art_commands import help_command as help_command
    from arthex.apps.cli.art_commands import run as run
    from arthex.apps.cli.main import app as app
    from arthex.apps.cli.migrate import migrate as migrate
    from arthex.apps.cli.skills import SKILL_NAMES as SKILL_NAMES
    from arthex.apps.cli.skills import init as init
    from arthex.apps.cli.skills import install_skills as install_skills

    __all__ = ["SKILL_NAMES", "app", "help_command", "init", "install_skills", "migrate", "run"]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
