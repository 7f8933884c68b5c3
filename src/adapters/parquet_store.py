"""`arthex.adapters.parquet_store` moved to `arthex.adapters.parquet.store`.

This path keeps working for one release, with a DeprecationWarning.
"""

import warnings

from .parquet.store import *  # noqa: F403

warnings.warn(
    "arthex.adapters.parquet_store moved to arthex.adapters.parquet.store; "
    "import from there (this path goes away in the next release)",
    DeprecationWarning,
    stacklevel=2,
)
