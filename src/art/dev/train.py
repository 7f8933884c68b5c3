"""ART's `art.dev.train`, under arthex: ART's experimental training options as TypedDicts
with ART's keys. arthex takes training options as `arthex.TrainConfig(...)` (or keywords of
`backend.train(...)`), which holds the keys arthex implements."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, TypedDict

from arthex.art._table import module_attributes


class TrainConfig(TypedDict, total=False):
    advantage_balance: float
    allow_training_without_logprobs: bool
    epsilon: float
    epsilon_high: float | None
    importance_sampling_level: Literal["token", "sequence", "average", "geometric_average"]
    kimi_k2_tau: float | None
    kl_penalty_coef: float
    kl_penalty_reference_step: int | None
    kl_penalty_source: Literal["current_learner", "sample"]
    kl_penalty_step_lag: int | None
    kl_ref_adapter_path: str | None
    logprob_calculation_chunk_size: int
    mask_prob_ratio: bool
    max_negative_advantage_importance_sampling_weight: float
    moe_routing_replay_bundle: Any | None
    moe_routing_replay_path: str | None
    moe_routing_replay_strict: bool
    num_trajectories_learning_rate_multiplier_power: float
    packed_sequence_length: int | None
    plot_tensors: bool
    ppo: bool
    precalculate_logprobs: bool
    scale_learning_rate_by_reward_std_dev: bool
    scale_rewards: bool
    truncated_importance_sampling: float | None


class TrainSFTConfig(TypedDict, total=False):
    metric_logging: dict[str, Any]


if not TYPE_CHECKING:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
