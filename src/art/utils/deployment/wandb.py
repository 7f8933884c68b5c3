"""ART's `art.utils.deployment.wandb`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.utils.deployment import WANDB_SUPPORTED_BASE_MODELS as WANDB_SUPPORTED_BASE_MODELS
    from arthex.utils.deployment import WandbDeploymentConfig as WandbDeploymentConfig
    from arthex.utils.deployment import deploy_wandb as deploy_wandb

    __all__ = [
        "WANDB_SUPPORTED_BASE_MODELS",
        "WandbDeploymentConfig",
        "deploy_wandb",
    ]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
