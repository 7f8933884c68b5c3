"""The `arthex` command: one module per command group, wired in `main`."""

from .main import app, main

__all__ = ["app", "main"]
