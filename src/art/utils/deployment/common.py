"""ART's `art.utils.deployment.common`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.utils.deployment import DeploymentConfig as DeploymentConfig
    from arthex.utils.deployment import DeploymentResult as DeploymentResult
    from arthex.utils.deployment import Provider as Provider
    from arthex.utils.deployment import deploy_model as deploy_model

    __all__ = [
        "DeploymentConfig",
        "DeploymentResult",
        "Provider",
        "deploy_model",
    ]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
