"""`arthex.local.LocalBackend`, where ART scripts import it from (`from art.local import
LocalBackend`); the same class as `arthex.LocalBackend`."""

from __future__ import annotations

from .adapters.local import LocalBackend

__all__ = ["LocalBackend"]
