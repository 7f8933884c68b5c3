"""ART's `art.adapter_leases`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.core.inference_target import ServingPin as InferenceTarget
    from arthex.utils.adapter_leases import pin_inference_step as pin_inference_step
    from arthex.utils.adapter_leases import pin_inference_target as pin_inference_target
    from arthex.utils.adapter_leases import pinned_inference_name as pinned_inference_name
    from arthex.utils.adapter_leases import pinned_inference_step as pinned_inference_step

    __all__ = [
        "InferenceTarget",
        "pin_inference_step",
        "pin_inference_target",
        "pinned_inference_name",
        "pinned_inference_step",
    ]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
