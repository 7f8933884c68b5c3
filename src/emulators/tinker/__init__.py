"""The local tinker emulator: `TinkerEmulator(dir)`, or `python -m arthex.emulators.tinker`.

It is `arthex serve --protocol tinker`'s app with test settings (server.py): the protocol is
`arthex.apps.server.tinker_protocol`, served by uvicorn on a thread of the calling process.
"""

from .server import TinkerEmulator, main

__all__ = ["TinkerEmulator", "main"]
