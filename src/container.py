"""`arthex.container` moved to `arthex.composition.container`.

This path keeps working for one release, with a DeprecationWarning.
"""

import warnings

from .composition.container import *  # noqa: F403

warnings.warn(
    "arthex.container moved to arthex.composition.container; "
    "import from there (this path goes away in the next release)",
    DeprecationWarning,
    stacklevel=2,
)
