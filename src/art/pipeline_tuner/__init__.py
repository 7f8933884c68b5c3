"""ART's `art.pipeline_tuner`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.core.pipeline.runtime_config import PipelineRuntimeConfig as PipelineRuntimeConfig
    from arthex.utils.pipeline_tuner import PackedGroupObservation as PackedGroupObservation
    from arthex.utils.pipeline_tuner import PackedGroupShape as PackedGroupShape
    from arthex.utils.pipeline_tuner import PackingLeafShape as PackingLeafShape
    from arthex.utils.pipeline_tuner import PipelineAutotuneConfig as PipelineAutotuneConfig
    from arthex.utils.pipeline_tuner import PipelineAutotunerProfile as PipelineAutotunerProfile
    from arthex.utils.pipeline_tuner import PipelineMetric as PipelineMetric
    from arthex.utils.pipeline_tuner import PipelineTuneSettings as PipelineTuneSettings

    __all__ = [
        "PackedGroupObservation",
        "PackedGroupShape",
        "PackingLeafShape",
        "PipelineAutotuneConfig",
        "PipelineAutotunerProfile",
        "PipelineMetric",
        "PipelineRuntimeConfig",
        "PipelineTuneSettings",
    ]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
