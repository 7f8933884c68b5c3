"""ART 0.5.23's pipeline tuner configuration (`art.pipeline_tuner`), and what arthex does with it.

ART's autotuner resizes a PipelineTrainer's rollout workers, batch bounds and queue as the run
goes, from vLLM's load metrics and the packing of its Megatron trainer's fixed-length
sequences, and saves what it settled on as a profile (`{run}/pipeline_tuner/{name}.json`).
`PipelineTrainer(autotune=PipelineAutotuneConfig(...))` means here what it means in ART:

- `mode="off"` (the default): no tuning; the pipeline's own settings apply.
- `mode="profile"`: the settings of a saved profile (`profile=` a name under the run's
  `pipeline_tuner/` folder, or a `.json` path), adjusted as ART adjusts them to this run's
  freshness bound (`max_steps_off_policy`): the workers capped so one queued batch stays
  inside the policy-age budget (`freshness_worker_limit`), the smallest batch raised to
  `freshness_min_batch_floor_fraction` of the target, the queue one target batch. A profile
  ART's online tuner wrote on a GPU cluster applies as it is. ART itself refuses this mode on
  any backend but its Megatron one (it needs that trainer's packed sequence length); arthex
  needs none of that to apply settings, so it applies them.
- `mode="online"`: refused when the trainer is built. Online tuning reads vLLM's scheduler
  metrics and the Megatron packer's spill rate each step, which arthex's backends do not have.

The data models (settings, metrics, packing shapes, decisions, profiles) are ART's fields and
checks, so profiles read and write both ways. The online tuner's own classes
(`PipelineAutotuner`, its attachment and worker controller) are not here.
"""

from __future__ import annotations

import math
import os
import warnings
from array import array
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import pydantic

from ..adapters.files import atomic_write_bytes
from ..core.identity import validate_name
from ..core.pipeline.runtime_config import PipelineRuntimeConfig
from .output_dirs import get_model_dir

if TYPE_CHECKING:
    from ..core.model import Model
    from ..core.trainable import TrainableModel

__all__ = [
    "PackedGroupObservation",
    "PackedGroupShape",
    "PackingLeafShape",
    "PipelineAutotuneConfig",
    "PipelineAutotunerProfile",
    "PipelineMetric",
    "PipelineRuntimeConfig",
    "PipelineTuneSettings",
    "PipelineTunerProfileStore",
    "TunerDecision",
    "TunerWindowStats",
    "build_initial_settings",
    "freshness_worker_limit",
    "recommended_queue_size",
]

PROFILE_FOLDER = "pipeline_tuner"


class PipelineAutotuneConfig(pydantic.BaseModel):
    """ART's autotuner settings (every field ART 0.5.23 has, with its default and bounds).
    arthex reads `mode`, `profile`, `max_rollout_workers`, `worker_step`,
    `queue_running_reserve_fraction` and `freshness_min_batch_floor_fraction`; the rest steer
    ART's online tuner and are checked and kept."""

    mode: Literal["off", "online", "profile"] = "off"
    profile: str | None = None
    output_name: str = "latest"
    window_steps: int = pydantic.Field(default=4, ge=1)
    warmup_ignore_steps: int = pydantic.Field(default=3, ge=0)
    target_spill_probability: float = pydantic.Field(default=0.03, ge=0.0, le=1.0)
    worker_step: int = pydantic.Field(default=2, ge=1)
    worker_move_fraction: float = pydantic.Field(default=0.10, gt=0.0, le=1.0)
    worker_load_change_windows: int = pydantic.Field(default=2, ge=1)
    max_worker_move: int = pydantic.Field(default=16, ge=4)
    max_rollout_workers: int = pydantic.Field(default=1024, ge=1)
    initial_model_calls_per_inference_gpu: int = pydantic.Field(default=8, ge=1)
    initial_min_groups_per_packed_sequence: int = pydantic.Field(default=8, ge=1)
    initial_max_groups_per_packed_sequence: int = pydantic.Field(default=8, ge=1)
    packing_trials: int = pydantic.Field(default=48, ge=16)
    packing_reservoir_multiplier: int = pydantic.Field(default=2, ge=2)
    packing_reservoir_min_groups: int = pydantic.Field(default=32, ge=16)
    packing_history_steps: int = pydantic.Field(default=64, ge=1)
    packing_spill_prior_alpha: float = pydantic.Field(default=1.0, gt=0.0)
    packing_spill_prior_beta: float = pydantic.Field(default=8.0, gt=0.0)
    packing_spill_confidence: float = pydantic.Field(default=0.8, gt=0.0, lt=1.0)
    queue_running_reserve_fraction: float = pydantic.Field(default=0.75, ge=0.0, le=1.0)
    trainer_load_under_score: float = pydantic.Field(default=0.08, ge=0.0)
    trainer_load_severe_under_score: float = pydantic.Field(default=0.50, ge=0.0)
    trainer_load_over_score: float = pydantic.Field(default=0.04, ge=0.0)
    vllm_pressure_over_ratio: float = pydantic.Field(default=0.80, ge=0.0)
    vllm_pressure_under_ratio: float = pydantic.Field(default=0.50, ge=0.0)
    queue_put_severe_frac: float = pydantic.Field(default=1.0 / 3.0, ge=0.0, le=1.0)
    stale_high_frac: float = pydantic.Field(default=0.20, ge=0.0, le=1.0)
    stale_clear_frac: float = pydantic.Field(default=0.10, ge=0.0, le=1.0)
    unused_and_dummy_high_frac: float = pydantic.Field(default=0.25, ge=0.0, le=1.0)
    trainer_min_batch_lower_score: float = pydantic.Field(default=0.15, ge=0.0)
    trainer_min_batch_raise_score: float = pydantic.Field(default=0.10, ge=0.0)
    min_batch_collect_improvement_ratio: float = pydantic.Field(default=0.85, gt=0.0, le=1.0)
    min_batch_trial_windows: int = pydantic.Field(default=2, ge=1)
    recommendation_min_windows: int = pydantic.Field(default=5, ge=1)
    recommendation_consecutive_holds: int = pydantic.Field(default=2, ge=1)
    freshness_min_batch_floor_fraction: float = pydantic.Field(default=0.85, gt=0.0, le=1.0)
    target_group_change_windows: int = pydantic.Field(default=1, ge=1)
    target_group_increase_fraction: float = pydantic.Field(default=0.20, gt=0.0, le=1.0)
    target_group_max_increase: int = pydantic.Field(default=64, ge=1)
    target_group_min_relative_change: float = pydantic.Field(default=0.10, ge=0.0, le=1.0)
    target_group_immediate_decrease_fraction: float = pydantic.Field(default=0.25, ge=0.0, le=1.0)
    vllm_metric_interval_s: float = pydantic.Field(default=1.0, gt=0.0)
    vllm_metric_timeout_window_frac: float = pydantic.Field(default=0.35, ge=0.0, le=1.0)

    @pydantic.model_validator(mode="after")
    def _hysteresis(self) -> PipelineAutotuneConfig:
        if self.stale_clear_frac > self.stale_high_frac:
            raise ValueError("stale_clear_frac must be <= stale_high_frac")
        if self.trainer_min_batch_raise_score > self.trainer_min_batch_lower_score:
            raise ValueError(
                "trainer_min_batch_raise_score must be <= trainer_min_batch_lower_score"
            )
        return self

    def pipeline_settings(
        self, model: TrainableModel, *, max_steps_off_policy: int | None
    ) -> PipelineRuntimeConfig | None:
        """What `PipelineTrainer(autotune=self)` runs with (the module's docstring): None for
        `mode="off"`, a saved profile's settings for `mode="profile"`."""
        if self.mode == "off":
            return None
        if self.mode == "online":
            raise ValueError(
                "autotune mode 'online' tunes from vLLM's scheduler metrics and the Megatron "
                "packer's spill rate, which arthex's backends do not have: run with "
                "mode='profile' and a profile ART's tuner saved, or set "
                "pipeline=PipelineRuntimeConfig(...)"
            )
        store = PipelineTunerProfileStore.for_model(model)
        saved = store.load(self.profile)
        return settings_for_profile(saved, self, policy_age_limit(max_steps_off_policy))


class PipelineTuneSettings(pydantic.BaseModel):
    """What the tuner sets: workers, batch bounds, queue size and the target batch."""

    num_rollout_workers: int = pydantic.Field(ge=1)
    min_batch_size: int = pydantic.Field(ge=1)
    max_batch_size: int = pydantic.Field(ge=1)
    queue_maxsize: int = pydantic.Field(ge=1)
    target_groups_per_step: int = pydantic.Field(ge=1)


class PipelineMetric(pydantic.BaseModel):
    """One measurement the tuner observes (name, value, seconds, step, tags)."""

    name: str
    value: float
    t_s: float
    step: int | None = None
    tags: dict[str, str] = pydantic.Field(default_factory=dict)


class PackingLeafShape(pydantic.BaseModel):
    """One leaf of a packed group: its tokens (unsigned 32-bit) and how many lead ones it
    shares with its siblings."""

    model_config = pydantic.ConfigDict(arbitrary_types_allowed=True)

    token_ids: array  # type: ignore[type-arg]  # array's item type is not a parameter here
    shareable_length: int = pydantic.Field(ge=0)

    @pydantic.model_validator(mode="after")
    def _shape(self) -> PackingLeafShape:
        if self.token_ids.typecode != "I":
            raise ValueError("packing token_ids must use unsigned 32-bit storage")
        if self.shareable_length > len(self.token_ids):
            raise ValueError("shareable_length exceeds packing token count")
        return self


class PackedGroupShape(pydantic.BaseModel):
    leaves: tuple[PackingLeafShape, ...] = pydantic.Field(min_length=1)


class PackedGroupObservation(PackedGroupShape):
    step: int


class TunerWindowStats(pydantic.BaseModel):
    """What the online tuner measured over a window of steps."""

    start_step: int
    end_step: int
    window_start_s: float = 0.0
    window_end_s: float = 0.0
    collect_batch_s: float = 0.0
    trainer_underfeed_score: float = 0.0
    vllm_pressure: float = 0.0
    vllm_waiting_capacity_request_s: float = pydantic.Field(default=0.0, ge=0.0)
    vllm_running_request_s: float = pydantic.Field(default=0.0, ge=0.0)
    queue_put_wait_frac: float = 0.0
    predicted_stale_frac: float = 0.0
    actual_stale_frac: float = 0.0
    unused_and_dummy_ratio_mean: float = 0.0
    vllm_poll_samples: int = 0
    vllm_poll_successes: int = 0
    vllm_poll_timeouts: int = 0
    vllm_poll_errors: int = 0
    vllm_poll_skipped: int = 0
    vllm_poll_coverage: float = 0.0
    vllm_poll_schedule_lag_p99_s: float = 0.0
    vllm_poll_request_latency_p99_s: float = 0.0


class TunerDecision(pydantic.BaseModel):
    """One change (or hold) the online tuner made, with the settings before and after."""

    step: int
    state: str
    action: str
    reason: str
    previous: PipelineTuneSettings
    updated: PipelineTuneSettings
    stats: TunerWindowStats | None = None
    recommendations: list[str] = pydantic.Field(default_factory=list)


class PipelineAutotunerProfile(pydantic.BaseModel):
    """A saved tuning: the settings, the config that produced them, and the conditions they
    were found under."""

    schema_version: int = 1
    model_name: str | None = None
    backend: str | None = None
    packed_sequence_length: int | None = None
    target_packed_sequences: int | None = None
    inference_gpu_count: int | None = None
    rollout_worker_capacity: int | None = pydantic.Field(default=None, ge=1)
    policy_age_limit_steps: float | None = None
    settings: PipelineTuneSettings
    config: PipelineAutotuneConfig
    decisions: list[TunerDecision] = pydantic.Field(default_factory=list)
    notes: list[str] = pydantic.Field(default_factory=list)


class PipelineTunerProfileStore:
    """Profiles as JSON files in one folder (`{run}/pipeline_tuner` for a model). A name is a
    file `{name}.json` in the folder (checked: no path separators, no `..`); an absolute path
    or a name ending in `.json` is that file. Saving writes a temporary file and renames it
    (fsynced), so a reader never sees half a profile."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    @classmethod
    def for_model(cls, model: Model) -> PipelineTunerProfileStore:
        return cls(Path(get_model_dir(model)) / PROFILE_FOLDER)

    def resolve(self, profile: str | None) -> Path:
        name = profile or "latest"
        path = Path(name)
        if path.is_absolute() or path.suffix == ".json":
            return path
        return self.root / f"{validate_name(name, 'profile')}.json"

    def load(self, profile: str | None) -> PipelineAutotunerProfile:
        path = self.resolve(profile)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ValueError(
                f"no pipeline tuner profile {profile or 'latest'!r}: {path} does not exist"
            ) from None
        except OSError as error:
            raise ValueError(f"cannot read the pipeline tuner profile {path}: {error}") from None
        try:
            return PipelineAutotunerProfile.model_validate_json(text)
        except pydantic.ValidationError as error:
            raise ValueError(f"{path} is not a pipeline tuner profile: {error}") from None

    def save(self, profile: str, data: PipelineAutotunerProfile) -> Path:
        path = self.resolve(profile)
        atomic_write_bytes(path, data.model_dump_json(indent=2).encode("utf-8"))
        return path


def policy_age_limit(max_steps_off_policy: int | None) -> float:
    """The policy-age budget ART's tuner sizes the pipeline for: `max_steps_off_policy`, or
    one step when the pipeline has no bound."""
    return 1.0 if max_steps_off_policy is None else float(max_steps_off_policy)


def _ceil_to_multiple(value: float, multiple: int, *, minimum: int) -> int:
    return max(minimum, math.ceil(value / multiple) * multiple)


def freshness_worker_limit(
    *,
    target_groups_per_step: int,
    limit_steps_off_policy: float,
    running_reserve_fraction: float,
    worker_step: int,
) -> int | None:
    """The most rollout workers (a multiple of `worker_step`, at least 1) that leave one
    queued target batch inside the completed work the policy-age budget allows, when a
    `running_reserve_fraction` of the workers is counted as still running; None when no
    reserve is counted (no limit)."""
    if running_reserve_fraction <= 0.0:
        return None
    target = max(1, int(target_groups_per_step))
    completed = math.floor(target * max(1.0, limit_steps_off_policy))
    limit = math.floor((completed - target) / running_reserve_fraction)
    step = max(1, worker_step)
    return max(1, limit // step * step)


def recommended_queue_size(*, target_groups_per_step: int) -> int:
    """One target batch of finished groups."""
    return max(1, int(target_groups_per_step))


def build_initial_settings(
    *,
    config: PipelineAutotuneConfig,
    inference_gpu_count: int,
    target_packed_sequences: int,
    policy_age_limit_steps: float,
    rollout_worker_capacity: int | None,
) -> PipelineTuneSettings:
    """The settings ART's tuner starts from: `initial_*_groups_per_packed_sequence` groups per
    packed sequence bound the batch; `initial_model_calls_per_inference_gpu` calls per GPU
    (rounded up to `worker_step`) set the workers, capped by `max_rollout_workers`, the
    freshness limit and the executor's capacity; the smallest batch is raised to the
    freshness floor; the queue holds one target batch."""
    slots = max(1, int(target_packed_sequences))
    largest = config.initial_max_groups_per_packed_sequence * slots
    smallest = min(config.initial_min_groups_per_packed_sequence * slots, largest)
    workers = min(
        config.max_rollout_workers,
        _ceil_to_multiple(
            config.initial_model_calls_per_inference_gpu * inference_gpu_count,
            config.worker_step,
            minimum=config.worker_step,
        ),
    )
    limit = freshness_worker_limit(
        target_groups_per_step=largest,
        limit_steps_off_policy=policy_age_limit_steps,
        running_reserve_fraction=config.queue_running_reserve_fraction,
        worker_step=config.worker_step,
    )
    for cap in (limit, rollout_worker_capacity):
        if cap is not None:
            workers = min(workers, cap)
    smallest = max(smallest, math.ceil(largest * config.freshness_min_batch_floor_fraction))
    return PipelineTuneSettings(
        num_rollout_workers=workers,
        min_batch_size=smallest,
        max_batch_size=largest,
        queue_maxsize=recommended_queue_size(target_groups_per_step=largest),
        target_groups_per_step=largest,
    )


def settings_for_profile(
    profile: PipelineAutotunerProfile,
    config: PipelineAutotuneConfig,
    policy_age_limit_steps: float,
) -> PipelineRuntimeConfig:
    """A saved profile's settings for this run, as ART applies one: refused when it asks for
    more workers than `config.max_rollout_workers`; workers capped by the freshness limit of
    this run's policy-age budget (with a warning when the profile was made under another);
    the smallest batch raised to the freshness floor of the target; the queue one target."""
    settings = profile.settings
    if settings.num_rollout_workers > config.max_rollout_workers:
        raise ValueError(
            f"the autotuner profile asks for num_rollout_workers="
            f"{settings.num_rollout_workers}, more than max_rollout_workers="
            f"{config.max_rollout_workers}"
        )
    if (
        profile.policy_age_limit_steps is not None
        and profile.policy_age_limit_steps != policy_age_limit_steps
    ):
        warnings.warn(
            f"the autotuner profile was made with policy_age_limit_steps="
            f"{profile.policy_age_limit_steps}, this run's is {policy_age_limit_steps}: its "
            "workers are capped for this run's limit",
            stacklevel=3,
        )
    target = settings.target_groups_per_step
    limit = freshness_worker_limit(
        target_groups_per_step=target,
        limit_steps_off_policy=policy_age_limit_steps,
        running_reserve_fraction=config.queue_running_reserve_fraction,
        worker_step=config.worker_step,
    )
    workers = (
        settings.num_rollout_workers if limit is None else min(settings.num_rollout_workers, limit)
    )
    smallest = max(
        settings.min_batch_size, math.ceil(target * config.freshness_min_batch_floor_fraction)
    )
    largest = max(settings.max_batch_size, smallest)
    return PipelineRuntimeConfig(
        num_rollout_workers=workers,
        min_batch_size=smallest,
        max_batch_size=largest,
        queue_maxsize=recommended_queue_size(target_groups_per_step=target),
    )
