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

pytest.register_assert_rewrite(
    "arthex.testing.contracts.metrics",
    "arthex.testing.contracts.sft",
    "arthex.testing.contracts.trajectory_store",
    "arthex.testing.contracts.training_backend",
)
