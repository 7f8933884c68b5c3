"""`arthex.api` moved to `arthex.composition.api`.

This path keeps working for one release, with a DeprecationWarning.
"""

import warnings

from .composition.api import *  # noqa: F403

warnings.warn(
    "arthex.api moved to arthex.composition.api; "
    "import from there (this path goes away in the next release)",
    DeprecationWarning,
    stacklevel=2,
)
