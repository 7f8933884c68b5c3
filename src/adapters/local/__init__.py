"""The local backend: a torch trainer and a built-in inference server on this machine.

Importing this package does not import torch; `register` does, and names the extra to install
when it is missing.
"""

from .backend import LocalBackend

__all__ = ["LocalBackend"]
