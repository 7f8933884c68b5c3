"""The git checkout arthex runs from, as ART's `art.utils.get_repo_root_path` finds its own."""

from __future__ import annotations

from pathlib import Path

__all__ = ["get_repo_root_path"]


def get_repo_root_path() -> str:
    """The nearest folder above arthex's package that holds `.git`, or "." when arthex is
    not run from a checkout (an installed wheel)."""
    here = Path(__file__).resolve().parent
    for folder in (here, *here.parents):
        if (folder / ".git").exists():
            return str(folder)
    return "."
