"""The local tinker emulator: `TinkerEmulator(dir)`, or `python -m arthex.emulators.tinker`.

server (HTTP and promises), service (training runs, sessions, futures), compute (torch training
and losses), sampling, store (checkpoints on disk), wire (the SDK's request and reply shapes).
"""

from .server import TinkerEmulator, main

__all__ = ["TinkerEmulator", "main"]
