"""`arthex.cli` moved to `arthex.apps.cli.main`.

This path keeps working for one release, with a DeprecationWarning.
"""

import warnings

from .apps.cli.main import *  # noqa: F403

warnings.warn(
    "arthex.cli moved to arthex.apps.cli.main; "
    "import from there (this path goes away in the next release)",
    DeprecationWarning,
    # run as `python -m`, the warning is this module's own (its caller is runpy, whose
    # warnings Python hides by default)
    stacklevel=1 if __name__ == "__main__" else 2,
)

if __name__ == "__main__":
    from .apps.cli.main import main

    main()
