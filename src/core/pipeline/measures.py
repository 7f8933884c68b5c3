"""What the pipeline measures per step, under ART's metric names.

Policy age: a group sampled by the policy of step v and trained in the update from step N is
N - v steps old; the age of a batch is weighted by completion tokens (the tokens the loss sees),
as ART's `offpolicy/token_weighted_policy_age_steps`. The sampled step is the step served when
the rollout started: a multi-turn rollout may see newer steps later, so the age is never
understated.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import attrs

from ..trajectories import Trajectory, TrajectoryGroup

STREAM_INDEX_KEY = "stream_index"
INITIAL_STEP_KEY = "initial_policy_version"
FINAL_STEP_KEY = "final_policy_version"


def completion_tokens(trajectory: Trajectory) -> int:
    """Sampled tokens over the trajectory's Choices (their logprob entries)."""
    total = 0
    for choice in trajectory.choices():
        content = choice.logprobs.content if choice.logprobs is not None else None
        if content:
            total += len(content)
        else:
            total += len((choice.model_extra or {}).get("token_ids") or ())
    return total


def group_tokens(groups: Iterable[TrajectoryGroup]) -> int:
    return sum(completion_tokens(t) for g in groups for t in g.trajectories)


def sampled_step(group: TrajectoryGroup) -> int:
    value = group.metadata.get(INITIAL_STEP_KEY)
    assert isinstance(value, int), "groups in the pipeline are stamped with their sampled step"
    return value


def stream_index(group: TrajectoryGroup) -> int | None:
    value = group.metadata.get(STREAM_INDEX_KEY)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def weighted_percentile(points: Sequence[tuple[float, float]], fraction: float) -> float:
    """The smallest value whose cumulative weight reaches `fraction` of the total."""
    ordered = sorted(points)
    total = math.fsum(weight for _, weight in ordered)
    running = 0.0
    for value, weight in ordered:
        running += weight
        if running >= fraction * total:
            return value
    return ordered[-1][0]


def policy_age_metrics(step: int, batch: Sequence[TrajectoryGroup]) -> dict[str, float]:
    """`offpolicy/token_weighted_policy_age_steps` and its p95 for the update from `step`
    (unweighted when the batch holds no sampled tokens)."""
    points: list[tuple[float, float]] = []
    for group in batch:
        age = float(step - sampled_step(group))
        for trajectory in group.trajectories:
            points.append((age, float(completion_tokens(trajectory))))
    if not points:
        return {}
    if math.fsum(weight for _, weight in points) <= 0:
        points = [(age, 1.0) for age, _ in points]
    total = math.fsum(weight for _, weight in points)
    return {
        "offpolicy/token_weighted_policy_age_steps": math.fsum(a * w for a, w in points) / total,
        "offpolicy/token_weighted_policy_age_p95_steps": weighted_percentile(points, 0.95),
        "offpolicy/max_policy_age_steps": max(age for age, _ in points),
    }


@attrs.define
class RolloutClock:
    """Rollout-side time and tokens since the last step (the trainer reads and resets it)."""

    rollout_s: float = 0.0
    idle_s: float = 0.0
    put_wait_s: float = 0.0
    tokens: int = 0

    def take(self) -> RolloutClock:
        taken = attrs.evolve(self)
        self.rollout_s = self.idle_s = self.put_wait_s = 0.0
        self.tokens = 0
        return taken


def discard_metrics(
    discarded_step: Mapping[str, int], discarded_cum: Mapping[str, int], trained_cum: int
) -> dict[str, float]:
    """`discarded/{step,cum,rate}/{reason}_groups`: a pipeline row's discard counters."""
    seen_cum = trained_cum + sum(discarded_cum.values())
    metrics: dict[str, float] = {}
    for reason in discarded_step:
        metrics[f"discarded/step/{reason}_groups"] = float(discarded_step[reason])
        metrics[f"discarded/cum/{reason}_groups"] = float(discarded_cum[reason])
        metrics[f"discarded/rate/{reason}_groups"] = discarded_cum[reason] / max(seen_cum, 1)
    return metrics


def before_update(
    *,
    collect_s: float,
    rollouts: RolloutClock,
    discarded_step: Mapping[str, int],
    discarded_cum: Mapping[str, int],
    trained_cum: int,
    dequeued: int,
    queue_depth: int,
) -> dict[str, float]:
    """The part of a step's pipeline row known before its update starts. It is kept in the
    record with the update, so a crash after the update still leaves the step its row."""
    metrics = discard_metrics(discarded_step, discarded_cum, trained_cum)
    metrics.update(
        {
            "queue/actual_stale_fraction": discarded_step["stale"] / max(dequeued, 1),
            "queue/groups_depth": float(queue_depth),
            "queue/put_wait_s": rollouts.put_wait_s,
            "queue/put_wait_frac": rollouts.put_wait_s
            / max(rollouts.put_wait_s + rollouts.rollout_s, 1e-9),
            "time/step_collect_batch_s": collect_s,
            "time/step_trainer_idle_s": collect_s,
            "time/step_rollout_s": rollouts.rollout_s,
            "time/step_rollout_idle_s": rollouts.idle_s,
        }
    )
    return metrics


def after_update(
    before: Mapping[str, float],
    *,
    wall_s: float,
    train_s: float,
    workers: int,
    batch_tokens: int,
    rollout_tokens: int,
    totals: dict[str, float],
) -> dict[str, float]:
    """The whole pipeline row: `before` plus the update's time, the idle ratios (trainer: the
    share of the step spent waiting for a batch; rollout: the share of the workers' time spent
    waiting for a fresh enough policy or for room in the queue) and the throughputs. `totals`
    carries the cumulative sums across steps, and across restarts (it lives in the record)."""
    out = dict(before)
    collect_s = out.get("time/step_collect_batch_s", 0.0)
    for key, value in (
        ("wall_s", wall_s),
        ("backend_train_s", train_s),
        ("trainer_idle_s", collect_s),
        ("rollout_s", out.get("time/step_rollout_s", 0.0)),
        ("rollout_idle_s", out.get("time/step_rollout_idle_s", 0.0)),
        ("worker_s", workers * wall_s),
        ("trained_tokens", float(batch_tokens)),
        ("rollout_tokens", float(rollout_tokens)),
    ):
        totals[key] = totals.get(key, 0.0) + value
    out.update(
        {
            "time/step_wall_s": wall_s,
            "time/step_backend_train_s": train_s,
            "time/cum/wall_s": totals["wall_s"],
            "time/cum/backend_train_s": totals["backend_train_s"],
            "time/step_trainer_idle_ratio": collect_s / max(wall_s, 1e-9),
            "time/cum/trainer_idle_ratio": totals["trainer_idle_s"] / max(totals["wall_s"], 1e-9),
            "time/step_rollout_idle_ratio": out.get("time/step_rollout_idle_s", 0.0)
            / max(workers * wall_s, 1e-9),
            "time/cum/rollout_idle_ratio": totals["rollout_idle_s"] / max(totals["worker_s"], 1e-9),
            "throughput/accepted_train_tok_per_s": batch_tokens / max(wall_s, 1e-9),
            "throughput/avg_trainer_tok_per_s": totals["trained_tokens"]
            / max(totals["backend_train_s"], 1e-9),
            "throughput/avg_rollout_tok_per_s": totals["rollout_tokens"]
            / max(totals["rollout_s"], 1e-9),
        }
    )
    return out
