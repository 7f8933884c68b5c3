"""Choosing an engine: vLLM when it is installed and a GPU is present, else torch."""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any, Literal

from ...core.errors import InvalidInputError

if TYPE_CHECKING:
    from .torch_engine import TorchEngine
    from .vllm_engine import VllmEngine

EngineKind = Literal["auto", "torch", "vllm"]


def pick_engine_kind(kind: EngineKind = "auto") -> Literal["torch", "vllm"]:
    """Resolve "auto" without starting anything: vLLM needs both the package and CUDA."""
    if kind == "torch" or kind == "vllm":
        return kind
    if kind != "auto":
        raise InvalidInputError(f"engine kind must be 'auto', 'torch' or 'vllm', got {kind!r}")
    if importlib.util.find_spec("vllm") is None:
        return "torch"
    try:
        import torch
    except ImportError:
        return "torch"
    return "vllm" if torch.cuda.is_available() else "torch"


def make_engine(
    base_model: str, kind: EngineKind = "auto", **kwargs: Any
) -> TorchEngine | VllmEngine:
    """Build (not start) the engine for `base_model`; keyword arguments go to its class."""
    if pick_engine_kind(kind) == "vllm":
        from .vllm_engine import VllmEngine

        return VllmEngine(base_model, **kwargs)
    from .torch_engine import TorchEngine

    return TorchEngine(base_model, **kwargs)
