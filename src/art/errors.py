"""ART's `art.errors`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.core.errors import ArthexError as ARTError
    from arthex.core.errors import ServingUnavailableError as LocalServingUnavailableError
    from arthex.utils.deployment import LoRADeploymentTimedOutError as LoRADeploymentTimedOutError
    from arthex.utils.deployment import (
        UnsupportedBaseModelDeploymentError as UnsupportedBaseModelDeploymentError,
    )
    from arthex.utils.deployment import (
        UnsupportedLoRADeploymentProviderError as UnsupportedLoRADeploymentProviderError,
    )
    from arthex.utils.s3 import ForbiddenBucketCreationError as ForbiddenBucketCreationError

    __all__ = [
        "ARTError",
        "ForbiddenBucketCreationError",
        "LoRADeploymentTimedOutError",
        "LocalServingUnavailableError",
        "UnsupportedBaseModelDeploymentError",
        "UnsupportedLoRADeploymentProviderError",
    ]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
