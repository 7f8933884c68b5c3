"""Metric rows: how one logged batch becomes one history row, and how keys are named."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import attrs

from .errors import InvalidInputError
from .trajectories import TrajectoryGroup

# The first part of a key that names what it measures, not a split: such keys are kept as
# they are (ART's sections, and arthex's `optim` and `diagnostics`).
SECTIONS: frozenset[str] = frozenset(
    {
        "loss",
        "data",
        "time",
        "costs",
        "discarded",
        "queue",
        "throughput",
        "objective",
        "offpolicy",
        "pipeline",
        "pipeline_settings",
        "sample_efficiency",
        "vllm",
        "optim",
        "diagnostics",
    }
)
# The splits every run knows; a key under one of them is kept as it is, whatever the split.
SPLITS: frozenset[str] = frozenset({"train", "val", "test"})
ZERO_VARIANCE_TOLERANCE = 1e-12
RESERVED_KEYS: frozenset[str] = frozenset({"step", "training_step", "recorded_at"})


def _finite_or_none(value: float | None) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _normalise_values(values: Mapping[str, Any]) -> dict[str, float | None]:
    clean: dict[str, float | None] = {}
    for key, value in values.items():
        if not isinstance(key, str) or not key:
            raise InvalidInputError(f"metric keys must be non-empty strings, got {key!r}")
        if key in RESERVED_KEYS:
            raise InvalidInputError(f"metric key {key!r} is reserved for the row itself")
        if value is not None and (isinstance(value, str) or not isinstance(value, int | float)):
            raise InvalidInputError(f"metric {key!r} must be a number, got {value!r}")
        clean[key] = _finite_or_none(value)
    return clean


def _as_utc(when: datetime) -> datetime:
    """In UTC. A naive time is local time, as ART writes `recorded_at`
    (`datetime.now().isoformat()`); `astimezone` reads a naive value that way."""
    return when.astimezone(UTC)


@attrs.frozen
class MetricsRow:
    """One history row: qualified metric keys at a step. Non-finite values are stored as None
    (they are not valid JSON), so a row reads back exactly as it was reported."""

    step: int = attrs.field()
    values: Mapping[str, float | None] = attrs.field(converter=_normalise_values)
    recorded_at: datetime = attrs.field(factory=lambda: datetime.now(UTC), converter=_as_utc)

    @step.validator
    def _check_step(self, _attribute: object, step: int) -> None:
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise InvalidInputError(f"step must be an integer >= 0, got {step!r}")

    def to_json(self) -> dict[str, Any]:
        """The history.jsonl object, in ART's row format."""
        return {
            **self.values,
            "step": self.step,
            "training_step": self.step,
            "recorded_at": self.recorded_at.isoformat(),
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> MetricsRow:
        """Read an ART or arthex row. Non-numeric values (none are written) are skipped."""
        step = obj.get("step", obj.get("training_step"))
        if isinstance(step, float) and step.is_integer():
            step = int(step)
        if not isinstance(step, int) or isinstance(step, bool):
            raise InvalidInputError(f"history row has no integer 'step': {dict(obj)!r:.200}")
        recorded = obj.get("recorded_at")
        when = datetime.now(UTC)
        if isinstance(recorded, str):
            try:
                when = datetime.fromisoformat(recorded)
            except ValueError:
                pass
        values = {
            key: (float(value) if value is not None else None)
            for key, value in obj.items()
            if key not in RESERVED_KEYS
            and (value is None or (isinstance(value, int | float) and not isinstance(value, bool)))
        }
        return cls(step=step, values=values, recorded_at=when)


def qualify_key(key: str, split: str) -> str:
    """`reward` -> `{split}/reward`; keys already under the split or a known section are kept.

    A custom split is prefixed once: `eval2/reward` stays `eval2/reward`.
    """
    head, sep, _ = key.partition("/")
    if sep and (head == split or head in SECTIONS or head in SPLITS):
        return key
    return f"{split}/{key}"


def qualify(metrics: Mapping[str, Any], split: str) -> dict[str, Any]:
    return {qualify_key(key, split): value for key, value in metrics.items()}


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values)


def _population_std(values: Sequence[float]) -> float:
    mean = _mean(values)
    return math.sqrt(math.fsum((v - mean) ** 2 for v in values) / len(values))


def is_trainable_group(group: TrajectoryGroup) -> bool:
    """At least two trajectories whose rewards are not all equal (within 1e-12)."""
    rewards = [t.reward for t in group.trajectories]
    return len(rewards) >= 2 and any(
        abs(r - rewards[0]) > ZERO_VARIANCE_TOLERANCE for r in rewards[1:]
    )


def _metric_means(sources: Iterable[Mapping[str, float | int | bool]]) -> dict[str, float]:
    sums: dict[str, list[float]] = {}
    for metrics in sources:
        for key, value in metrics.items():
            if not key.startswith(SUMMED_PREFIXES):
                sums.setdefault(key, []).append(float(value))
    return {key: _mean(values) for key, values in sums.items()}


COSTS_PREFIX = "costs/"
DIAGNOSTICS_PREFIX = "diagnostics/"
SUMMED_PREFIXES = (COSTS_PREFIX, DIAGNOSTICS_PREFIX)


def _cost_sums(groups: Sequence[TrajectoryGroup]) -> dict[str, float]:
    """`costs/...` keys of group and trajectory metrics (a judge's tokens, an API's dollars)
    are what the batch spent: summed over the batch, under their own name, as ART does. So are
    `diagnostics/...` counts (a judge's corrective retries): how often it happened in the
    batch."""
    totals: dict[str, list[float]] = {}
    for group in groups:
        for metrics in (group.metrics, *(t.metrics for t in group.trajectories)):
            for key, value in metrics.items():
                if key.startswith(SUMMED_PREFIXES):
                    totals.setdefault(key, []).append(float(value))
    return {key: math.fsum(values) for key, values in totals.items()}


# ART's names for the counts of one logged batch (its `metrics_taxonomy.py`): the train split
# writes them under the `data/` section (with running totals under `data/cum/`, see
# `cumulative_keys`), every other split under `{split}/data/`. Scenarios are groups.
STEP_NUM_SCENARIOS = "data/step_num_scenarios"
STEP_NUM_TRAJECTORIES = "data/step_num_trajectories"
STEP_NUM_GROUPS_SUBMITTED = "data/step_num_groups_submitted"
STEP_NUM_GROUPS_TRAINABLE = "data/step_num_groups_trainable"
TRAIN_SPLIT = "train"


def data_counts(groups: Sequence[TrajectoryGroup], split: str) -> dict[str, float]:
    """The batch's counts under ART's keys (failed rollouts count as trajectories)."""
    counts = {
        STEP_NUM_SCENARIOS: float(len(groups)),
        STEP_NUM_TRAJECTORIES: float(sum(len(g.trajectories) + len(g.exceptions) for g in groups)),
        STEP_NUM_GROUPS_SUBMITTED: float(len(groups)),
    }
    if split == TRAIN_SPLIT:
        counts[STEP_NUM_GROUPS_TRAINABLE] = float(sum(is_trainable_group(g) for g in groups))
        return counts
    return {f"{split}/{key}": value for key, value in counts.items()}


def computed_summary(groups: Sequence[TrajectoryGroup], split: str) -> dict[str, float]:
    """What arthex computes from a batch itself: reward, spread, exception rate, counts."""
    trajectories = [t for g in groups for t in g.trajectories]
    n_exceptions = sum(len(g.exceptions) for g in groups)
    row: dict[str, float] = {}
    if trajectories:
        row[f"{split}/reward"] = _mean([t.reward for t in trajectories])
    stds = [
        _population_std([t.reward for t in g.trajectories])
        for g in groups
        if len(g.trajectories) >= 2
    ]
    row[f"{split}/reward_std_dev"] = _mean(stds) if stds else 0.0
    if trajectories or n_exceptions:
        row[f"{split}/exception_rate"] = n_exceptions / (len(trajectories) + n_exceptions)
    row.update(data_counts(groups, split))
    return row


def custom_summary(groups: Sequence[TrajectoryGroup], split: str) -> dict[str, float]:
    """The user's own metrics of a batch, qualified by the one rule (`qualify_key`): the mean
    of each trajectory metric `k` as `qualify_key(k)`, of each group metric `k` (over groups
    with at least one trajectory) as `qualify_key("group/" + k)`; `costs/...` metrics are
    summed over the batch under their own name."""
    trajectories = [t for g in groups for t in g.trajectories]
    means = _metric_means(t.metrics for t in trajectories)
    row = qualify({k: v for k, v in means.items() if not k.startswith(SUMMED_PREFIXES)}, split)
    group_means = _metric_means(g.metrics for g in groups if g.trajectories)
    row.update(
        qualify(
            {f"group/{k}": v for k, v in group_means.items() if not k.startswith(SUMMED_PREFIXES)},
            split,
        )
    )
    row.update(_cost_sums(groups))  # what the batch spent: summed, not averaged
    return row


def merge_metrics(
    computed: Mapping[str, float], *custom: tuple[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """One row from the computed metrics and the users' (`(source, metrics)` pairs, later
    sources winning over earlier ones). A user metric may not give a computed key another
    value: that would silently change what the policies and dashboards read, so it is an
    InvalidInputError naming the key (the same value is the same fact, and allowed)."""
    row: dict[str, Any] = {}
    for source, metrics in custom:
        for key, value in metrics.items():
            if key in computed and not _same(value, computed[key]):
                raise InvalidInputError(
                    f"{source} metric {key!r} ({value!r}) clashes with the value arthex "
                    f"computes for that key ({computed[key]!r}); rename the metric"
                )
            row[key] = value
    row.update(computed)
    return row


def _same(value: Any, computed: float) -> bool:
    """The same fact: equal up to float rounding (a caller's mean summed in another order
    differs in the last bits), NaN for NaN."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return False
    if math.isnan(number) or math.isnan(computed):
        return math.isnan(number) and math.isnan(computed)
    return math.isclose(number, computed, rel_tol=1e-9, abs_tol=1e-12)


def summarize(groups: Sequence[TrajectoryGroup], split: str) -> dict[str, float]:
    """The metrics of one logged batch (BEHAVIOUR.md, one history row): computed ones and the
    trajectories' and groups' own, which may not clash with them."""
    merged = merge_metrics(
        computed_summary(groups, split), ("trajectory or group", custom_summary(groups, split))
    )
    return {key: float(value) for key, value in merged.items()}


def cumulative_key(key: str) -> str | None:
    """ART's running total of a per-step count: `data/step_num_x` -> `data/cum/num_x`,
    `time/step_x_s` -> `time/cum/x_s`, `costs/x` -> `costs/cum/x`; None for other keys."""
    section, slash, rest = key.partition("/")
    if not slash or section not in _CUMULATIVE_SECTIONS or rest.startswith("cum/"):
        return None
    if key in _NOT_CUMULATIVE:
        return None
    if section == "costs":
        return f"costs/cum/{rest}"
    if not rest.startswith("step_"):
        return None
    return f"{section}/cum/{rest[len('step_') :]}"


_CUMULATIVE_SECTIONS = frozenset({"data", "time", "costs"})
_NOT_CUMULATIVE = frozenset({"data/step_unused_and_dummy_ratio"})


CANONICAL_TRAINING_KEYS: Mapping[str, str] = {
    "loss": "loss/train",
    "grad_norm": "loss/grad_norm",
    "learning_rate": "loss/learning_rate",
    "entropy": "loss/entropy",
}


def aggregate_training_metrics(samples: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Average the backend's per-gradient-step dicts per key (over the samples that have it),
    with canonical names: `loss` -> `loss/train`, `grad_norm` -> `loss/grad_norm`, ..."""
    sums: dict[str, list[float]] = {}
    for sample in samples:
        for key, value in sample.items():
            name = CANONICAL_TRAINING_KEYS.get(key, key)
            if "/" not in name:
                name = f"loss/{name}"
            number = float(value)
            if math.isfinite(number):
                sums.setdefault(name, []).append(number)
            else:
                sums.setdefault(name, [])
    return {key: (_mean(values) if values else math.nan) for key, values in sums.items()}
