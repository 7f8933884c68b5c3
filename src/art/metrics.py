"""ART's `art.metrics`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.accounting.builder import MetricDefinition as MetricDefinition
    from arthex.accounting.builder import MetricsBuilder as MetricsBuilder
    from arthex.accounting.builder import is_builder_managed_metric as is_builder_managed_metric
    from arthex.accounting.builder import is_cumulative_metric_key as is_cumulative_metric_key
    from arthex.accounting.builder import to_cumulative_metric_key as to_cumulative_metric_key
    from arthex.accounting.catalogue import (
        PIPELINE_RL_DASHBOARD_DEFAULT_METRICS as PIPELINE_RL_DASHBOARD_DEFAULT_METRICS,
    )
    from arthex.accounting.catalogue import (
        PIPELINE_RL_METRIC_DEFINITIONS as PIPELINE_RL_METRIC_DEFINITIONS,
    )
    from arthex.accounting.catalogue import PIPELINE_RL_SCORE_METRICS as PIPELINE_RL_SCORE_METRICS

    __all__ = [
        "PIPELINE_RL_DASHBOARD_DEFAULT_METRICS",
        "PIPELINE_RL_METRIC_DEFINITIONS",
        "PIPELINE_RL_SCORE_METRICS",
        "MetricDefinition",
        "MetricsBuilder",
        "is_builder_managed_metric",
        "is_cumulative_metric_key",
        "to_cumulative_metric_key",
    ]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
