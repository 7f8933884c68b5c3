"""ART's `art.utils.wandb_sdk`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.utils.wandb_sdk import api as api
    from arthex.utils.wandb_sdk import artifact as artifact
    from arthex.utils.wandb_sdk import comm_error_type as comm_error_type
    from arthex.utils.wandb_sdk import init as init
    from arthex.utils.wandb_sdk import login as login
    from arthex.utils.wandb_sdk import settings as settings

    __all__ = [
        "api",
        "artifact",
        "comm_error_type",
        "init",
        "login",
        "settings",
    ]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
