"""`PipelineTrainer(autotune=PipelineAutotuneConfig(...))` with ART 0.5.23's meaning: "off"
changes nothing, "profile" runs with a saved tuner profile's settings fitted to the run's
freshness bound, "online" is refused when the trainer is built. Expected settings are worked
by hand below from ART's rules (tests/interop/test_art_pipeline_tuner.py compares the same
rules with ART's own code)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pydantic
import pytest

from arthex.art import PipelineAutotuneConfig, PipelineRuntimeConfig
from arthex.art.pipeline_tuner import PipelineAutotunerProfile, PipelineTuneSettings
from arthex.art.pipeline_tuner.autotune import build_initial_settings, freshness_worker_limit
from arthex.art.pipeline_tuner.store import PipelineTunerProfileStore
from arthex.core.errors import InvalidInputError
from arthex.core.pipeline import PipelineTrainer

from ._pipeline_world import RUN, World
from .test_pipeline_runtime_config import trainer as runtime_trainer

SETTINGS = {"num_rollout_workers": 48, "min_batch_size": 16, "max_batch_size": 32,
            "queue_maxsize": 8, "target_groups_per_step": 32}  # fmt: skip


def profile_file(path: Path, settings: dict[str, int] = SETTINGS, **fields: Any) -> Path:
    """A profile as ART's tuner writes one: JSON with its settings and config."""
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {"settings": settings, "config": {"mode": "online"}, **fields}
    path.write_text(json.dumps(body), encoding="utf-8")
    return path


def trainer(
    world: World, off_policy: int | None = 2, **options: Any
) -> PipelineTrainer[Any, Any, Any]:
    """The runtime-config tests' trainer, two steps off policy unless told."""
    return runtime_trainer(world, off_policy, **options)


def settings(made: PipelineTrainer[Any, Any, Any]) -> tuple[int, int, int, int]:
    return made.num_rollout_workers, made.min_batch_size, made.max_batch_size, made.queue_maxsize


def test_a_saved_profile_sets_the_pipeline_fitted_to_the_freshness_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the model's run folder: .art/pipe/models/model
    profile_file(
        tmp_path / ".art" / RUN.project / "models" / RUN.name / "pipeline_tuner" / "fast.json"
    )
    made = trainer(World(), autotune=PipelineAutotuneConfig(mode="profile", profile="fast"))
    # 2 steps off policy: 64 groups may be complete, one batch of 32 queued, 3/4 of the workers
    # running: (64 - 32) / 0.75 = 42.7 -> 42 workers (a multiple of worker_step 2); the smallest
    # batch is raised to 0.85 x 32 = 27.2 -> 28; the queue holds one target batch, 32
    assert settings(made) == (42, 28, 32, 32)
    assert made.pipeline == PipelineRuntimeConfig(
        num_rollout_workers=42, min_batch_size=28, max_batch_size=32, queue_maxsize=32
    )


def test_a_profile_by_path_and_a_looser_bound_keep_the_profiles_workers(tmp_path: Path) -> None:
    path = profile_file(tmp_path / "elsewhere" / "p.json")
    made = trainer(World(), 4, autotune=PipelineAutotuneConfig(mode="profile", profile=str(path)))
    # 4 steps: (128 - 32) / 0.75 = 128 workers allowed, the profile's 48 kept
    assert settings(made) == (48, 28, 32, 32)


def test_a_profile_made_under_another_bound_warns_and_is_refitted(tmp_path: Path) -> None:
    path = profile_file(tmp_path / "p.json", policy_age_limit_steps=4.0)
    with pytest.warns(UserWarning, match=r"policy_age_limit_steps=4.0, this run's is 2.0"):
        made = trainer(World(), autotune=PipelineAutotuneConfig(mode="profile", profile=str(path)))
    assert made.num_rollout_workers == 42


def test_a_profile_trains_with_its_settings(tmp_path: Path) -> None:
    small = {"num_rollout_workers": 1, "min_batch_size": 1, "max_batch_size": 1,
             "queue_maxsize": 1, "target_groups_per_step": 1}  # fmt: skip
    path = profile_file(tmp_path / "one.json", small)
    world = World()
    made = trainer(world, 0, autotune=PipelineAutotuneConfig(mode="profile", profile=str(path)))
    assert settings(made) == (1, 1, 1, 1)
    asyncio.run(made.train())
    assert asyncio.run(world.backend.checkpoint_steps(RUN)) == [0, 1, 2, 3]  # a group a step


def test_off_is_the_pipelines_own_settings() -> None:
    made = trainer(World(), autotune=PipelineAutotuneConfig(), pipeline=PipelineRuntimeConfig(
        num_rollout_workers=3, min_batch_size=2))  # fmt: skip
    assert settings(made) == (3, 2, 20, 40)


def test_what_the_tuner_cannot_do_is_refused_when_the_trainer_is_built(tmp_path: Path) -> None:
    path = str(profile_file(tmp_path / "p.json"))
    with pytest.raises(InvalidInputError, match=r"mode 'online' .* vLLM's scheduler metrics"):
        trainer(World(), autotune=PipelineAutotuneConfig(mode="online"))
    with pytest.raises(InvalidInputError, match=r"cannot be given while autotune decides .*"
                       r"pipeline=\.\.\., min_batch_size"):  # fmt: skip
        trainer(World(), autotune=PipelineAutotuneConfig(mode="profile", profile=path),
                pipeline=PipelineRuntimeConfig(), min_batch_size=2)  # fmt: skip
    with pytest.raises(InvalidInputError, match=r"no pipeline tuner profile 'gone'"):
        trainer(World(), autotune=PipelineAutotuneConfig(mode="profile", profile="gone"))
    with pytest.raises(InvalidInputError, match=r"profile"):
        trainer(World(), autotune=PipelineAutotuneConfig(mode="profile", profile="../up"))
    with pytest.raises(InvalidInputError, match=r"num_rollout_workers=48, more than .*=40"):
        trainer(World(), autotune=PipelineAutotuneConfig(
            mode="profile", profile=path, max_rollout_workers=40))  # fmt: skip
    (tmp_path / "bad.json").write_text('{"settings": {}}')
    with pytest.raises(InvalidInputError, match=r"bad.json is not a pipeline tuner profile"):
        trainer(
            World(),
            autotune=PipelineAutotuneConfig(mode="profile", profile=str(tmp_path / "bad.json")),
        )
    with pytest.raises(InvalidInputError, match=r"autotune must be a PipelineAutotuneConfig"):
        trainer(World(), autotune={"mode": "profile"})
    with pytest.raises(pydantic.ValidationError, match="stale_clear_frac must be <="):
        PipelineAutotuneConfig(stale_clear_frac=0.5)


def test_a_profile_is_saved_whole_and_reads_back(tmp_path: Path) -> None:
    store = PipelineTunerProfileStore(tmp_path / "tuner")
    profile = PipelineAutotunerProfile(
        settings=PipelineTuneSettings(**SETTINGS), config=PipelineAutotuneConfig(worker_step=4)
    )
    path = store.save("kept", profile)
    assert path == tmp_path / "tuner" / "kept.json"
    assert json.loads(path.read_text())["config"]["worker_step"] == 4  # the physical file
    assert store.load("kept") == profile
    assert sorted(p.name for p in path.parent.iterdir()) == ["kept.json"]  # no temporary left
    with pytest.raises(ValueError, match="profile"):
        store.save("a/b", profile)


def test_the_starting_settings_and_the_freshness_limit_follow_worked_examples() -> None:
    config = PipelineAutotuneConfig()
    start = build_initial_settings(
        config=config,
        inference_gpu_count=2,
        target_packed_sequences=3,
        policy_age_limit_steps=4.0,
        rollout_worker_capacity=10,
    )
    # 8 groups x 3 packed sequences = 24 a step (min 8 x 3 too); 8 calls x 2 GPUs = 16 workers,
    # under the freshness limit (96 - 24) / 0.75 = 96, capped by the executor's 10
    assert start == PipelineTuneSettings(num_rollout_workers=10, min_batch_size=24,
                                         max_batch_size=24, queue_maxsize=24,
                                         target_groups_per_step=24)  # fmt: skip
    assert freshness_worker_limit(target_groups_per_step=7, limit_steps_off_policy=3.5,
                                  running_reserve_fraction=0.5, worker_step=3) == 33  # fmt: skip
    # floor(7 x 3.5) = 24 complete; (24 - 7) / 0.5 = 34 -> 33, a multiple of 3
    assert freshness_worker_limit(target_groups_per_step=10, limit_steps_off_policy=2.0,
                                  running_reserve_fraction=0.0, worker_step=2) is None  # fmt: skip
