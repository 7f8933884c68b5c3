"""Moved to `arthex.emulators.tinker`; this path keeps working for one release."""

from __future__ import annotations

import warnings

from ..emulators.tinker.server import TinkerEmulator, main

warnings.warn(
    "arthex.testing.tinker_emulator moved to arthex.emulators.tinker; "
    "import TinkerEmulator from there (this path goes away in the next release)",
    DeprecationWarning,
    # run as `python -m`, the warning is this module's own (its caller is runpy, whose
    # warnings Python hides by default)
    stacklevel=1 if __name__ == "__main__" else 2,
)

__all__ = ["TinkerEmulator", "main"]

if __name__ == "__main__":
    main()
