"""`arthex.testing.fake_backend` moved to `arthex.testing.fakes.backend`.

This path keeps working for one release, with a DeprecationWarning.
"""

import warnings

from .fakes.backend import *  # noqa: F403

warnings.warn(
    "arthex.testing.fake_backend moved to arthex.testing.fakes.backend; "
    "import from there (this path goes away in the next release)",
    DeprecationWarning,
    stacklevel=2,
)
