"""The OpenAI-compatible inference server and the sampling engines behind it.

Importing this package imports neither torch nor fastapi: the engines and the server are
loaded on first attribute access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .engine import Sample, SamplingEngine, SamplingParams, UnknownModelError
from .select import make_engine

if TYPE_CHECKING:
    from .http_server import InferenceServer
    from .torch_engine import TorchEngine
    from .vllm_engine import VllmEngine

__all__ = [
    "InferenceServer",
    "Sample",
    "SamplingEngine",
    "SamplingParams",
    "TorchEngine",
    "UnknownModelError",
    "VllmEngine",
    "make_engine",
]

_LAZY = {
    "InferenceServer": ".server",
    "TorchEngine": ".torch_engine",
    "VllmEngine": ".vllm_engine",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
