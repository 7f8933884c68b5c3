"""`arthex.cli` moved to `arthex.apps.cli.main`.

This path keeps working for one release, with a DeprecationWarning.
"""

import warnings

from .apps.cli.main import *  # noqa: F403

warnings.warn(
    "arthex.cli moved to arthex.apps.cli.main; "
    "import from there (this path goes away in the next release)",
    DeprecationWarning,
    stacklevel=2,
)

if __name__ == "__main__":
    from .apps.cli.main import main

    main()
