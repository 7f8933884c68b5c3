"""The Tinker protocol: `arthex serve --protocol tinker` (main, app: the service behind the
server's Guard and Observer) and the service it serves.

service (routing) with its parts: sessions, training_runs, sampling_sessions and futures
(promises, the compute thread), served (the base models by name), quota (the server's
tenant quotas on runs); the torch side: base_model (the causal LM and its LoRA copies),
compute (a training run's adapter and optimizer), losses, sampling; store (checkpoints on
disk), external (signed weight downloads), wire (the SDK's request and reply shapes, the
user error). `arthex.emulators.tinker` serves the same app on loopback for tests and offline
use.
"""
