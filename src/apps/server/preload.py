"""Importing a backend's heavy libraries before a server listens."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Sequence


def preload(modules: Sequence[str]) -> None:
    """Import the backend's heavy libraries before listening, so the server is ready when it
    says so and the first register does not wait seconds for torch. (Not on a side thread:
    transformers' lazy module is not safe to import from two threads at once.)"""
    for name in modules:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
