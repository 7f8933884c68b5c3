"""ART 0.5.23's pipeline tuner configuration and arthex's under `arthex.art` give the same
outcomes on the same cases (art/pipeline_tuner_script.py, one script for both): the initial
settings ART's tuner starts from, its freshness limit on workers and its queue size on a grid,
`PipelineAutotuneConfig`'s checks, a profile saved and loaded, and a saved profile's settings
fitted to a run's policy-age limit as ART's profile mode fits them."""

from __future__ import annotations

from pathlib import Path

from .art_env import both_outcomes

INITIAL = [
    [{}, 1, 1, 1.0, None],
    [{}, 2, 3, 4.0, None],
    [{}, 2, 3, 4.0, 10],
    [{"worker_step": 4, "initial_model_calls_per_inference_gpu": 5}, 3, 2, 2.0, None],
    [{"initial_min_groups_per_packed_sequence": 2, "initial_max_groups_per_packed_sequence": 6,
      "freshness_min_batch_floor_fraction": 0.5}, 4, 2, 3.0, None],
    [{"max_rollout_workers": 6, "queue_running_reserve_fraction": 0.0}, 8, 1, 1.0, None],
    [{"queue_running_reserve_fraction": 0.3}, 8, 5, 0.0, 7],
]  # fmt: skip
LIMITS = [
    [32, 2.0, 0.75, 2], [32, 4.0, 0.75, 2], [24, 1.0, 0.75, 2], [7, 3.5, 0.5, 3],
    [1, 0.0, 1.0, 1], [10, 2.0, 0.0, 2], [100, 1.5, 0.2, 8],
]  # fmt: skip
CONFIGS = [
    {},
    {"mode": "profile", "profile": "fast", "worker_step": 4},
    {"mode": "online", "window_steps": 0},
    {"stale_clear_frac": 0.3, "stale_high_frac": 0.2},
    {"trainer_min_batch_raise_score": 0.2},
    {"mode": "sometimes"},
    {"packing_spill_confidence": 1.0, "max_worker_move": 3},
]
PROFILE = {
    "model_name": "run-7",
    "backend": "LocalBackend",
    "packed_sequence_length": 16384,
    "target_packed_sequences": 4,
    "inference_gpu_count": 2,
    "policy_age_limit_steps": 2.0,
    "settings": {"num_rollout_workers": 48, "min_batch_size": 16, "max_batch_size": 32,
                 "queue_maxsize": 32, "target_groups_per_step": 32},
    "config": {"mode": "online", "worker_step": 4},
    "decisions": [{
        "step": 5, "state": "probe", "action": "raise_workers", "reason": "underfed",
        "previous": {"num_rollout_workers": 40, "min_batch_size": 16, "max_batch_size": 32,
                     "queue_maxsize": 32, "target_groups_per_step": 32},
        "updated": {"num_rollout_workers": 48, "min_batch_size": 16, "max_batch_size": 32,
                    "queue_maxsize": 32, "target_groups_per_step": 32},
        "stats": {"start_step": 2, "end_step": 5, "trainer_underfeed_score": 0.4},
        "recommendations": ["more workers"],
    }],
    "notes": ["made on 2 GPUs"],
}  # fmt: skip
APPLIED = [
    [{"num_rollout_workers": 48, "min_batch_size": 16, "max_batch_size": 32,
      "queue_maxsize": 8, "target_groups_per_step": 32}, {}, 2.0],
    [{"num_rollout_workers": 48, "min_batch_size": 30, "max_batch_size": 32,
      "queue_maxsize": 8, "target_groups_per_step": 32}, {}, 4.0],
    [{"num_rollout_workers": 9, "min_batch_size": 2, "max_batch_size": 10,
      "queue_maxsize": 3, "target_groups_per_step": 10},
     {"worker_step": 4, "freshness_min_batch_floor_fraction": 0.5}, 0.0],
    [{"num_rollout_workers": 64, "min_batch_size": 4, "max_batch_size": 16,
      "queue_maxsize": 16, "target_groups_per_step": 16},
     {"queue_running_reserve_fraction": 0.0}, 1.0],
]  # fmt: skip


def test_the_tuner_configuration_gives_arts_outcomes(tmp_path: Path) -> None:
    cases = {"initial": INITIAL, "limit": LIMITS, "queue": [0, 1, 17], "configs": CONFIGS,
             "profile": PROFILE, "folder": str(tmp_path / "pipeline_tuner"),
             "applied": APPLIED}  # fmt: skip
    art, ours = both_outcomes("pipeline_tuner_script", cases)
    assert ours == art
    # ART's answers are not empty ones: the grid has limits, refusals and a saved decision
    assert art["limit"][0] == 42 and art["limit"][5] is None
    assert art["configs"][3] == {"error": [""]} and "error" in art["configs"][5]
    assert art["saved"][0] == "tuned.json" and art["loaded"]["decisions"][0]["step"] == 5
