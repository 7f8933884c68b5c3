"""What the pipeline's metric keys mean, for dashboards: ART's pipeline-RL metric catalogue,
kept to the keys arthex writes.

ART's catalogue describes its Megatron trainer's and vLLM's measures as well (packed-capacity
token counts, vLLM's scheduler gauges, its autotuner's score); arthex writes none of those, so
their definitions are not here rather than describing keys no arthex run has. Each definition
here is a key that arthex's PipelineTrainer, or the LocalBackend's and TinkerBackend's
trainers, write to the run's history (tests/e2e/test_pipeline_backends.py reads them back),
with ART's title, kind, unit, direction and flags, and a description of arthex's measure.
`objective/score` (ART's autotuner's figure of merit) is not written, so the score's
components below are the inputs arthex records, not a score.
"""

from __future__ import annotations

from .builder import MetricDefinition

__all__ = [
    "PIPELINE_RL_DASHBOARD_DEFAULT_METRICS",
    "PIPELINE_RL_METRIC_DEFINITIONS",
    "PIPELINE_RL_SCORE_METRICS",
]

_TOKENS = "tok/s"

PIPELINE_RL_METRIC_DEFINITIONS: tuple[MetricDefinition, ...] = (
    MetricDefinition(
        key="offpolicy/token_weighted_policy_age_steps",
        title="Token-weighted policy age",
        description=(
            "mean age, in train steps, of the policy that sampled the trained groups, "
            "weighted by their completion tokens"
        ),
        kind="gauge",
        unit="steps",
        higher_is_better=False,
        score_component=True,
    ),
    MetricDefinition(
        key="throughput/accepted_train_tok_per_s",
        title="Accepted train tokens per second",
        description="completion tokens of the trained groups divided by the step's wall time",
        kind="rate",
        unit=_TOKENS,
        higher_is_better=True,
        dashboard_default=True,
        score_component=True,
    ),
    MetricDefinition(
        key="loss/importance_ratio_mean",
        title="Importance ratio mean",
        description="mean importance-sampling ratio over the trained tokens",
        kind="ratio",
        higher_is_better=None,
    ),
    MetricDefinition(
        key="loss/importance_ratio_p95",
        title="Importance ratio p95",
        description="p95 importance-sampling ratio over the trained tokens, from every ratio",
        kind="ratio",
        higher_is_better=False,
    ),
    MetricDefinition(
        key="loss/importance_ratio_p99",
        title="Importance ratio p99",
        description="p99 importance-sampling ratio over the trained tokens, from every ratio",
        kind="ratio",
        higher_is_better=False,
    ),
    MetricDefinition(
        key="loss/clipped_token_fraction",
        title="Clipped token fraction",
        description="fraction of the trained tokens whose importance ratio the loss's clip acts on",
        kind="ratio",
        higher_is_better=False,
    ),
    MetricDefinition(
        key="queue/actual_stale_fraction",
        title="Actual stale dequeue fraction",
        description="groups discarded as stale divided by all groups dequeued for this step",
        kind="ratio",
        higher_is_better=False,
    ),
    MetricDefinition(
        key="queue/put_wait_frac",
        title="Completed queue wait fraction",
        description="rollout workers' queue-put wait divided by that wait plus rollout time",
        kind="ratio",
        higher_is_better=False,
    ),
    MetricDefinition(
        key="queue/put_wait_s",
        title="Completed queue wait",
        description="worker-seconds spent waiting to enqueue finished rollout groups",
        kind="duration",
        unit="seconds",
        higher_is_better=False,
    ),
)

PIPELINE_RL_DASHBOARD_DEFAULT_METRICS: tuple[str, ...] = tuple(
    d.key for d in PIPELINE_RL_METRIC_DEFINITIONS if d.dashboard_default
)
PIPELINE_RL_SCORE_METRICS: tuple[str, ...] = tuple(
    d.key for d in PIPELINE_RL_METRIC_DEFINITIONS if d.score_component
)
