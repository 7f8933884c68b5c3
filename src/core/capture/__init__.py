"""Capture: record an unmodified agent's model calls, with the exact tokens, as trajectories.

The scope and its forms live here; the transport hook that feeds it is an adapter
(`arthex.adapters.http_capture`), registered by the public `arthex.capture*` names.
"""

from __future__ import annotations

from ..conversations import Conversation
from .conversations import conversations
from .endpoints import register_endpoint
from .forms import capture, capture_calls, capture_trajectory, capture_trajectory_group
from .samples import TokenSample, token_samples
from .scope import add_transport_hook, current_trajectory, no_capture, recorder_for
from .training import training_groups

__all__ = [
    "Conversation",
    "TokenSample",
    "add_transport_hook",
    "capture",
    "capture_calls",
    "capture_trajectory",
    "capture_trajectory_group",
    "conversations",
    "current_trajectory",
    "no_capture",
    "recorder_for",
    "register_endpoint",
    "token_samples",
    "training_groups",
]
