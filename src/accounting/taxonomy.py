"""ART's `art.metrics_taxonomy`: the `data/step_*` counts of a batch of groups, and the
averaging of per-sample training metrics. A group is trainable by arthex's own rule
(`arthex.core.metrics.is_trainable_group`: two or more rewards, not all equal), which is ART's."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..core.metrics import is_trainable_group
from ..core.trajectories import TrajectoryGroup

__all__ = [
    "SFT_GRADIENT_STEP_KEY",
    "SFT_METRIC_PREFIX",
    "SFT_WANDB_GRADIENT_STEP_KEY",
    "TRAIN_GRADIENT_STEPS_KEY",
    "TrajectoryBatchSummary",
    "average_metric_samples",
    "build_data_metrics_from_summary",
    "build_training_summary_metrics",
    "summarize_trajectory_groups",
]

TRAIN_GRADIENT_STEPS_KEY = "data/step_num_gradient_steps"
SFT_METRIC_PREFIX = "sft"
SFT_GRADIENT_STEP_KEY = "gradient_step"
SFT_WANDB_GRADIENT_STEP_KEY = f"{SFT_METRIC_PREFIX}/{SFT_GRADIENT_STEP_KEY}"
_SAME_IN_EVERY_SAMPLE = frozenset({TRAIN_GRADIENT_STEPS_KEY})


def average_metric_samples(metric_samples: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """Each key's mean over the samples that have it; a gradient-step count must be the same
    in every sample (ValueError otherwise) and is kept as it is."""
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for sample in metric_samples:
        for key, raw in sample.items():
            value = float(raw)
            if key in _SAME_IN_EVERY_SAMPLE and key in sums and sums[key] / counts[key] != value:
                raise ValueError(
                    f"Metric '{key}' must be invariant across samples, "
                    f"got {sums[key] / counts[key]} and {value}."
                )
            sums[key] = sums.get(key, 0.0) + value
            counts[key] = counts.get(key, 0) + 1
    return {key: sums[key] / counts[key] for key in sums}


@dataclass(frozen=True)
class TrajectoryBatchSummary:
    num_scenarios: int
    num_trajectories: int
    num_groups_submitted: int
    num_groups_trainable: int
    scenario_ids: list[str]


def _scenario_id(group: TrajectoryGroup) -> str | None:
    """The group's `scenario_id` metadata, else its first trajectory's that has one."""
    for metadata in (group.metadata, *(t.metadata for t in group.trajectories)):
        if metadata.get("scenario_id") is not None:
            return str(metadata["scenario_id"])
    return None


def summarize_trajectory_groups(
    trajectory_groups: Iterable[TrajectoryGroup],
) -> TrajectoryBatchSummary:
    """Counts of a batch: groups, rollouts (failed ones included), trainable groups, and the
    distinct scenario ids in order of first appearance."""
    groups = list(trajectory_groups)
    ids = [i for g in groups if (i := _scenario_id(g)) is not None]
    return TrajectoryBatchSummary(
        num_scenarios=len(groups),
        num_trajectories=sum(len(g.trajectories) + len(g.exceptions) for g in groups),
        num_groups_submitted=len(groups),
        num_groups_trainable=sum(1 for g in groups if is_trainable_group(g)),
        scenario_ids=list(dict.fromkeys(ids)),
    )


def build_data_metrics_from_summary(
    summary: TrajectoryBatchSummary, *, include_trainable_groups: bool
) -> dict[str, float]:
    """The summary as `data/step_*` metrics (trainable groups only when asked: train steps)."""
    metrics = {
        "data/step_num_scenarios": float(summary.num_scenarios),
        "data/step_num_trajectories": float(summary.num_trajectories),
        "data/step_num_groups_submitted": float(summary.num_groups_submitted),
    }
    if include_trainable_groups:
        metrics["data/step_num_groups_trainable"] = float(summary.num_groups_trainable)
    return metrics


build_training_summary_metrics = build_data_metrics_from_summary
