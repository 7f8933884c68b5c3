"""Helpers ART scripts use from `art.utils`, with the same names and meaning (stdlib only)."""

from __future__ import annotations

from .iterate_dataset import DatasetBatch, iterate_dataset
from .limit_concurrency import limit_concurrency
from .retry import retry

__all__ = ["DatasetBatch", "iterate_dataset", "limit_concurrency", "retry"]
