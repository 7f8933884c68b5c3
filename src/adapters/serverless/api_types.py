"""The hosted serverless training API's values, as its resource client (api.py) reads and sends
them: the answers are pydantic models (their declared fields are the API's; any other field
the server adds is kept, readable as an attribute), the request options are TypedDicts.

The names and fields are ART 0.5.23's `art.serverless.client` ones, so code written against
that client reads the same attributes here.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

import pydantic

__all__ = [
    "Checkpoint",
    "CheckpointListParams",
    "DeleteCheckpointsResponse",
    "ExperimentalTrainingConfig",
    "Model",
    "SFTMetricLogging",
    "SFTTrainingConfig",
    "SFTTrainingJob",
    "TrainingJob",
    "TrainingJobEvent",
    "TrainingJobEventListParams",
]

TrainingJobEventType = Literal[
    "training_started", "gradient_step", "training_ended", "training_failed"
]


class _Answer(pydantic.BaseModel):
    """A value the server answered with; fields it adds beyond the declared ones are kept."""

    model_config = pydantic.ConfigDict(extra="allow")


class Model(_Answer):
    """A registered model; `id` names it in every other call."""

    id: str
    entity: str
    project: str
    name: str
    base_model: str
    run_id: str | None


class Checkpoint(_Answer):
    """One saved step of a model; `id` is the cursor of a checkpoint listing."""

    id: str
    step: int
    metrics: dict[str, float]


class DeleteCheckpointsResponse(_Answer):
    deleted_count: int
    not_found_steps: list[int]


class TrainingJob(_Answer):
    id: str


class SFTTrainingJob(_Answer):
    id: str


class TrainingJobEvent(_Answer):
    """One event of a job; `id` is the cursor to list the events after it."""

    id: str
    type: TrainingJobEventType
    data: dict[str, Any]


class CheckpointListParams(TypedDict, total=False):
    after: str
    limit: int
    order: Literal["asc", "desc"]


class TrainingJobEventListParams(TypedDict, total=False):
    after: str
    limit: int


class ExperimentalTrainingConfig(TypedDict, total=False):
    """A training job's options, by the hosted API's names; an option left out (or None) is
    the server's default."""

    advantage_balance: float | None
    allow_training_without_logprobs: bool | None
    epsilon: float | None
    epsilon_high: float | None
    importance_sampling_level: Literal["token", "sequence", "average", "geometric_average"] | None
    kimi_k2_tau: float | None
    kl_penalty_coef: float | None
    kl_penalty_reference_step: int | None
    kl_penalty_source: Literal["current_learner", "sample"] | None
    kl_penalty_step_lag: int | None
    kl_ref_adapter_path: str | None
    learning_rate: float | None
    logprob_calculation_chunk_size: int | None
    loss_fn: Literal["cispo", "ppo"] | None
    mask_prob_ratio: bool | None
    max_negative_advantage_importance_sampling_weight: float | None
    normalize_advantages: bool | None
    num_trajectories_learning_rate_multiplier_power: float | None
    packed_sequence_length: int | None
    plot_tensors: bool | None
    ppo: bool | None
    precalculate_logprobs: bool | None
    scale_learning_rate_by_reward_std_dev: bool | None
    scale_rewards: bool | None
    truncated_importance_sampling: float | None


class SFTMetricLogging(TypedDict, total=False):
    enabled: bool
    target_training_step: int


class SFTTrainingConfig(TypedDict, total=False):
    batch_size: int | None
    learning_rate: float | list[float] | None
    assistant_turns: Literal["all", "last"]
    metric_logging: SFTMetricLogging | None
