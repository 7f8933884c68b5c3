"""The Tinker protocol's service: what the tinker SDK's endpoints do, behind an HTTP front.

service (routing) with its parts: sessions, training_runs, sampling_sessions and futures
(promises, the compute thread); the torch side: base_model (the causal LM and its LoRA
copies), compute (a training run's adapter and optimizer), losses, sampling; store
(checkpoints on disk), external (signed weight downloads), wire (the SDK's request and reply
shapes, the user error). `arthex.emulators.tinker` serves it on loopback for tests and
offline use.
"""
