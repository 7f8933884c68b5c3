"""The public capture names (`arthex.capture`, ...), wired to the httpx transport hook.

The scope lives in the core and knows nothing of HTTP; importing this module registers the
adapter that feeds it, which is installed the first time a scope opens.
"""

from __future__ import annotations

from ..adapters.http_capture import install
from ..core.capture import (
    capture,
    capture_calls,
    capture_trajectory,
    capture_trajectory_group,
    current_trajectory,
    no_capture,
)
from ..core.capture.scope import add_transport_hook

add_transport_hook(install)

__all__ = [
    "capture",
    "capture_calls",
    "capture_trajectory",
    "capture_trajectory_group",
    "current_trajectory",
    "no_capture",
]
