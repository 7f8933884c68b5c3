"""A local, deterministic stand-in for ART's `art.rewards.ruler_score_group` (an LLM judge
reached over the network), with its signature and contract: it returns a new group whose
rewards are the judge's scores, keeps each original reward in `metrics["independent_reward"]`
and the score in `metrics["ruler_score"]`, and returns None on failure when asked to swallow
exceptions. The judge prefers replies with more digits, which a tiny model can learn."""

from __future__ import annotations

import arthex as art


def judge(reply: str) -> float:
    return sum(c.isdigit() for c in reply) / max(len(reply), 1)


async def ruler_score_group(
    group: art.TrajectoryGroup,
    judge_model: str = "local/digits",
    extra_litellm_params: dict[str, object] | None = None,
    rubric: str = "",
    *,
    swallow_exceptions: bool = False,
    debug: bool = False,
) -> art.TrajectoryGroup | None:
    try:
        scored = []
        for trajectory in group.trajectories:
            new = trajectory.model_copy(deep=True)
            reply = new.messages()[-1].get("content") or ""
            score = judge(str(reply))
            new.metrics["independent_reward"] = trajectory.reward
            new.metrics["ruler_score"] = score
            new.reward = score
            scored.append(new)
        return art.TrajectoryGroup(
            scored,
            exceptions=group.exceptions,
            metadata=group.metadata,
            metrics=group.metrics,
            logs=group.logs,
        )
    except Exception:
        if swallow_exceptions:
            return None
        raise
