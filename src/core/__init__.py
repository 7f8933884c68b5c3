"""The core, in two layers; no adapter, no heavy library.

- The domain: values and rules (trajectories, configs, metrics, the learning-rate and
  retention policies, SFT's plan, the pipeline record). It imports no port.
- The use cases, which drive the three ports (`arthex.ports`): `model`, `trainable`,
  `fine_tuning`, `run_state`, `lease_book`, `backend_train` (ART's `backend.train(model, ...)`)
  and the `pipeline` package. tests/unit/test_dependency_rule.py holds the line between them.
"""
