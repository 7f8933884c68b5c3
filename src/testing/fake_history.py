"""`arthex.testing.fake_history` moved to `arthex.testing.fakes.history`.

This path keeps working for one release, with a DeprecationWarning.
"""

import warnings

from .fakes.history import *  # noqa: F403

warnings.warn(
    "arthex.testing.fake_history moved to arthex.testing.fakes.history; "
    "import from there (this path goes away in the next release)",
    DeprecationWarning,
    stacklevel=2,
)
