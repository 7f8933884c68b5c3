"""The local tinker emulator: `TinkerEmulator(dir)`, or `python -m arthex.emulators.tinker`.

server.py is its HTTP front; the protocol behind it is `arthex.apps.server.tinker_protocol`.
"""

from .server import TinkerEmulator, main

__all__ = ["TinkerEmulator", "main"]
