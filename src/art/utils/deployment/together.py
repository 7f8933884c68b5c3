"""ART's `art.utils.deployment.together`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.utils.deployment import (
        TOGETHER_SUPPORTED_BASE_MODELS as TOGETHER_SUPPORTED_BASE_MODELS,
    )
    from arthex.utils.deployment import TogetherDeploymentConfig as TogetherDeploymentConfig
    from arthex.utils.deployment import TogetherJob as TogetherJob
    from arthex.utils.deployment import TogetherJobStatus as TogetherJobStatus
    from arthex.utils.deployment import deploy_to_together as deploy_to_together

    __all__ = [
        "TOGETHER_SUPPORTED_BASE_MODELS",
        "TogetherDeploymentConfig",
        "TogetherJob",
        "TogetherJobStatus",
        "deploy_to_together",
    ]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
