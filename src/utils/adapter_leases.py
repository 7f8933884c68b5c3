"""Pinning a model's inference to one step, under ART's names (`art.adapter_leases`).

`async with pin_inference_step(model.name, step):` makes `model.get_inference_name()` name
`step` inside the block (a registered trainable model; arthex's `pinned_serving`), so a
rollout keeps sampling the policy it started with while training moves on;
`pin_inference_target(..., inference_name=...)` pins the exact name to send for that step.
`pinned_inference_step` and `pinned_inference_name` read the pin, as ART's backends do.
ART's pin value `InferenceTarget(step, model_name)` is arthex's `ServingPin(step,
served_name)`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from ..core.inference_target import pinned_serving, serving_pin

__all__ = [
    "pin_inference_step",
    "pin_inference_target",
    "pinned_inference_name",
    "pinned_inference_step",
]


def pinned_inference_step(model_name: str) -> int | None:
    """The step `model_name`'s inference is pinned to here, None when it is not pinned."""
    pin = serving_pin(model_name)
    return None if pin is None else pin.step


def pinned_inference_name(model_name: str, step: int | None = None) -> str | None:
    """The exact name pinned for `model_name` (and for `step`, when given), else None."""
    pin = serving_pin(model_name)
    if pin is None or (step is not None and step != pin.step):
        return None
    return pin.served_name


@asynccontextmanager
async def pin_inference_target(
    model_name: str, *, step: int, inference_name: str | None = None
) -> AsyncIterator[None]:
    """Pin `model_name`'s inference to `step` (and the name `inference_name`) in the block."""
    with pinned_serving(model_name, step, inference_name):
        yield


@asynccontextmanager
async def pin_inference_step(model_name: str, step: int) -> AsyncIterator[None]:
    """Pin `model_name`'s inference to `step` in the block."""
    with pinned_serving(model_name, step):
        yield
