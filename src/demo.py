"""`arthex.demo` moved to `arthex.apps.demo`.

This path keeps working for one release, with a DeprecationWarning.
"""

import warnings

from .apps.demo import *  # noqa: F403

warnings.warn(
    "arthex.demo moved to arthex.apps.demo; "
    "import from there (this path goes away in the next release)",
    DeprecationWarning,
    stacklevel=2,
)
