"""The Tinker backend: training on the Tinker service through its pinned SDK (`tinker==0.38.0`).

Importing this package imports neither the SDK nor torch; `register` does, and names the extra
to install when it is missing.
"""

from .backend import TinkerBackend

__all__ = ["TinkerBackend"]
