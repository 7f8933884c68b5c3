"""The local tinker emulator: `TinkerEmulator(dir)`, or `python -m arthex.emulators.tinker`.

server (HTTP), service (routing) with its parts: sessions, training_runs, sampling_sessions
and futures (promises, the compute thread); the torch side: base_model (the causal LM and its
LoRA copies), compute (a training run's adapter and optimizer), losses, sampling; store
(checkpoints on disk), wire (the SDK's request and reply shapes, the user error).
"""

from .server import TinkerEmulator, main

__all__ = ["TinkerEmulator", "main"]
