"""What the judge reads and what it must answer: pure functions, no calls.

Each trajectory is shown as its conversations (the main one, then additional histories or
other captured threads, e.g. sub-agents) in plain chat messages. Messages every trajectory
starts with are shown once, as shared context; tools are listed once. The judge answers with a
JSON object `{"scores": [{"trajectory_id", "explanation", "score"}, ...]}`, one entry per id.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Any

import attrs
from pydantic import BaseModel

from ..core.capture.conversations import conversations
from ..core.conversations import Conversation
from ..core.trajectories import Trajectory

DEFAULT_RUBRIC = """\
- A trajectory that reaches its goal scores clearly higher than one that does not.
- Between two that reach it, the more direct one (fewer wasted steps, no pointless tool calls)
  scores higher.
- Small differences in quality give small differences in score; large ones, large differences.
- Progress toward the goal without reaching it earns partial credit."""
"""The grading standard used when none is given: relative, and task-agnostic (the judge takes
the task from the trajectories' own system and user messages)."""

SCORES_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "scores": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "trajectory_id": {"type": "string"},
                    "explanation": {"type": "string"},
                    "score": {"type": "number"},
                },
                "required": ["trajectory_id", "explanation", "score"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["scores"],
    "additionalProperties": False,
}


class TrajectoryScore(BaseModel):
    """The judge's verdict on one trajectory (ids are "1".."n" in the order shown)."""

    trajectory_id: str
    explanation: str
    score: float


class JudgeReply(BaseModel):
    """The judge's whole reply, the object `SCORES_SCHEMA` asks for: one score per trajectory
    (`parse_scores` reads a reply more leniently and checks the ids and the range)."""

    scores: list[TrajectoryScore]


@attrs.frozen
class View:
    """One trajectory as the judge sees it."""

    conversations: tuple[Conversation, ...]

    @classmethod
    def of(cls, trajectory: Trajectory) -> View:
        return cls(tuple(conversations(trajectory)))

    def key(self) -> str:
        return json.dumps(
            [[list(c.messages), list(c.tools or ())] for c in self.conversations],
            sort_keys=True,
            default=str,
        )


def judge_messages(views: Sequence[View], rubric: str) -> list[dict[str, str]]:
    """The system and user messages of one judging request, trajectories in the given order."""
    mains = [list(v.conversations[0].messages) if v.conversations else [] for v in views]
    shared = _common_prefix(mains) if len(views) > 1 else 0
    parts: list[str] = []
    if shared:
        parts.append("<context>\n" + _dump(mains[0][:shared]) + "\n</context>")
    tools = next((c.tools for v in views for c in v.conversations if c.tools), None)
    if tools:
        parts.append("<available_tools>\n" + _dump(list(tools)) + "\n</available_tools>")
    blocks = []
    for index, view in enumerate(views, start=1):
        body = [_dump(mains[index - 1][shared:])]
        for h, other in enumerate(view.conversations[1:], start=2):
            body.append(f'<history id="{index}.{h}">\n{_dump(list(other.messages))}\n</history>')
        blocks.append(f'<trajectory id="{index}">\n' + "\n".join(body) + "\n</trajectory>")
    parts.append("Trajectories:\n\n" + "\n\n".join(blocks))
    ids = ", ".join(str(i) for i in range(1, len(views) + 1))
    system = (
        "Every trajectory below was given the same goal. Judge each of them and give it a score "
        "between 0 and 1, taking the goal from the conversations themselves. A trajectory may "
        "hold further conversations (<history>), such as sub-agents it ran; judge them as "
        "part of it.\n\nGrading standards:\n"
        f"{rubric.strip()}\n\n"
        f'Answer with one JSON object and nothing else: {{"scores": [{{"trajectory_id": '
        f'"1", "explanation": "...", "score": 0.5}}, ...]}}, with exactly {len(views)} '
        f"entries, one for each of these trajectory ids: {ids}."
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": "\n\n".join(parts)}]


def correction(problem: str, expected: int) -> str:
    ids = ", ".join(str(i) for i in range(1, expected + 1))
    return (
        f"That answer could not be used: {problem}. Answer again with one JSON object holding "
        f"exactly {expected} scores, one for each trajectory id ({ids}), each a number from 0 "
        "to 1, and nothing else."
    )


class ReplyError(ValueError):
    """The judge's reply is not a usable set of scores; the message says why."""


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


def parse_scores(content: str | None, expected: int) -> list[TrajectoryScore]:
    """Scores for ids "1".."expected", in id order. Tolerates a code fence or prose around the
    object (small judges add them); refuses anything else, naming the problem."""
    if not content or not content.strip():
        raise ReplyError("the reply is empty")
    text = content.strip()
    fenced = _FENCE.search(text)
    if fenced:
        text = fenced.group(1).strip()
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise ReplyError("the reply holds no JSON object")
    try:
        data = json.loads(text[start : end + 1])
    except ValueError as error:
        raise ReplyError(f"the reply is not valid JSON ({error})") from None
    entries = data.get("scores") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise ReplyError('the reply has no "scores" list')
    if len(entries) != expected:
        raise ReplyError(f"the reply holds {len(entries)} scores for {expected} trajectories")
    found: dict[str, TrajectoryScore] = {}
    for entry in entries:
        if not isinstance(entry, dict):
            raise ReplyError("a score entry is not an object")
        ident = str(entry.get("trajectory_id", "")).strip()
        score = entry.get("score")
        if isinstance(score, bool) or not isinstance(score, int | float):
            raise ReplyError(f"trajectory {ident or '?'} has no numeric score")
        if not math.isfinite(score) or not 0.0 <= score <= 1.0:
            raise ReplyError(f"trajectory {ident}'s score {score!r} is not between 0 and 1")
        if ident in found:
            raise ReplyError(f"trajectory {ident} is scored twice")
        explanation = entry.get("explanation")
        found[ident] = TrajectoryScore(
            trajectory_id=ident,
            explanation=explanation if isinstance(explanation, str) else "",
            score=float(score),
        )
    wanted = [str(i) for i in range(1, expected + 1)]
    if sorted(found) != sorted(wanted):
        raise ReplyError(f"the reply scores ids {sorted(found)}, expected {wanted}")
    return [found[i] for i in wanted]


def _common_prefix(lists: Sequence[list[dict[str, Any]]]) -> int:
    n = 0
    for items in zip(*lists):
        if any(item != items[0] for item in items[1:]):
            break
        n += 1
    return n


def _dump(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)
