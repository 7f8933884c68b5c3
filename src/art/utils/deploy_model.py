"""ART's `art.utils.deploy_model`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.utils.deployment import (
        TOGETHER_SUPPORTED_BASE_MODELS as TOGETHER_SUPPORTED_BASE_MODELS,
    )
    from arthex.utils.deployment import WANDB_SUPPORTED_BASE_MODELS as WANDB_SUPPORTED_BASE_MODELS
    from arthex.utils.deployment import DeploymentConfig as DeploymentConfig
    from arthex.utils.deployment import DeploymentResult as DeploymentResult
    from arthex.utils.deployment import LoRADeploymentJob as LoRADeploymentJob
    from arthex.utils.deployment import LoRADeploymentProvider as LoRADeploymentProvider
    from arthex.utils.deployment import Provider as Provider
    from arthex.utils.deployment import TogetherDeploymentConfig as TogetherDeploymentConfig
    from arthex.utils.deployment import TogetherJobStatus as TogetherJobStatus
    from arthex.utils.deployment import WandbDeploymentConfig as WandbDeploymentConfig
    from arthex.utils.deployment import deploy_model as deploy_model
    from arthex.utils.deployment import deploy_wandb as deploy_wandb
    from arthex.utils.output_dirs import get_default_art_path as get_default_art_path
    from arthex.utils.output_dirs import get_model_step as get_model_step
    from arthex.utils.s3 import archive_and_presign_step_url as archive_and_presign_step_url
    from arthex.utils.s3 import pull_model_from_s3 as pull_model_from_s3

    __all__ = [
        "TOGETHER_SUPPORTED_BASE_MODELS",
        "WANDB_SUPPORTED_BASE_MODELS",
        "DeploymentConfig",
        "DeploymentResult",
        "LoRADeploymentJob",
        "LoRADeploymentProvider",
        "Provider",
        "TogetherDeploymentConfig",
        "TogetherJobStatus",
        "WandbDeploymentConfig",
        "archive_and_presign_step_url",
        "deploy_model",
        "deploy_wandb",
        "get_default_art_path",
        "get_model_step",
        "pull_model_from_s3",
    ]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
