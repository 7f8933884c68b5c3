"""Contract mixins: subclass one, override its fixture hook, and get the whole suite.

The kit's modules are registered for pytest's assertion rewriting before any of them is
imported, so a failing contract test shows the values it compared (`assert 2 == 3` with the
expressions behind them), in a third party's test run as in ours.
"""

from ...core.errors import MissingExtraError

try:
    import pytest
except ImportError as error:  # the kit runs under pytest: the `testing` extra brings it
    raise MissingExtraError("pytest", "testing") from error

# Every module of the kit (a test checks none is missing).
MODULES = (
    "backend_base",
    "backend_checkpoints",
    "backend_lifecycle",
    "backend_serving",
    "backend_steps",
    "environment",
    "metrics",
    "pipeline_state",
    "run_lease",
    "scenario",
    "sft",
    "trajectory_store",
    "training_backend",
)
pytest.register_assert_rewrite(*(f"arthex.testing.contracts.{name}" for name in MODULES))
