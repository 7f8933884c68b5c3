"""`arthex.loaders` moved to `arthex.apps.loaders`.

This path keeps working for one release, with a DeprecationWarning.
"""

import warnings

from .apps.loaders import *  # noqa: F403

warnings.warn(
    "arthex.loaders moved to arthex.apps.loaders; "
    "import from there (this path goes away in the next release)",
    DeprecationWarning,
    stacklevel=2,
)
