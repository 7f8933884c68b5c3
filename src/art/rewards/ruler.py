"""ART's `art.rewards.ruler`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.rewards.prompt import DEFAULT_RUBRIC as DEFAULT_RUBRIC
    from arthex.rewards.prompt import JudgeReply as Response
    from arthex.rewards.prompt import TrajectoryScore as TrajectoryScore
    from arthex.rewards.ruler import ruler as ruler
    from arthex.rewards.ruler import ruler_score_group as ruler_score_group

    __all__ = ["DEFAULT_RUBRIC", "Response", "TrajectoryScore", "ruler", "ruler_score_group"]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
