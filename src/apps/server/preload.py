"""Making the backend a server serves, its heavy libraries imported before the server listens."""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ...core.errors import ArthexError

if TYPE_CHECKING:
    from ...ports.training_backend import TrainingBackend


def backend_named(name: str) -> TrainingBackend:
    """The backend `--backend NAME` names, the local one's torch and transformers imported
    (see `preload`). One that cannot be made exits 1 with one line."""
    from ...composition.container import backend

    try:
        made = backend(name)
    except ArthexError as exc:
        sys.exit(f"arthex serve: {exc}")
    if name == "local":
        preload(("torch", "transformers"))
    return made


def preload(modules: Sequence[str]) -> None:
    """Import the backend's heavy libraries before listening, so the server is ready when it
    says so and the first register does not wait seconds for torch. (Not on a side thread:
    transformers' lazy module is not safe to import from two threads at once.)"""
    for name in modules:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
