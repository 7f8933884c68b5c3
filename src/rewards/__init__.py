"""Rewards from a judge: `ruler_score_group` ranks a group's trajectories with an LLM.

As in ART (`from art.rewards import ruler_score_group`), for any OpenAI-compatible judge.
"""

from __future__ import annotations

from .cache import JudgeCache, Verdict
from .prompt import DEFAULT_RUBRIC, TrajectoryScore
from .ruler import JudgeError, JudgeUsage, Price, rank_agreement, ruler, ruler_score_group

__all__ = [
    "DEFAULT_RUBRIC",
    "JudgeCache",
    "JudgeError",
    "JudgeUsage",
    "Price",
    "TrajectoryScore",
    "Verdict",
    "rank_agreement",
    "ruler",
    "ruler_score_group",
]
