"""`arthex doctor`: preflight checks, each a function that returns `Check` values.

Every check looks, never changes: nothing is downloaded and no file written; the lease's lock
is only probed (a shared lock, dropped at once).
The command (`apps/cli/doctor.py`) prints one line per check and exits with `exit_code`:
0 when every check is ok, 1 with a warning, 2 with a failure.
"""

from __future__ import annotations

from .check import Check, Status, exit_code

__all__ = ["Check", "Status", "exit_code"]
