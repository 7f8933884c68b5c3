"""ART 0.5.23's data model under arthex: every public field of ART's Trajectory,
TrajectoryGroup, (legacy) History, History (the base of ART's per-protocol histories),
TrainConfig and TrainSFTConfig is a field of arthex's class of the same role, with ART's
default, and a group as ART's ServerlessBackend sends it (`model_dump(mode="json")`, every
field set) reads back with the same values.

The fields and the group were written by ART's own interpreter (tests/interop/art/
model_fields.py) into tests/unit/data/art_0_5_23_fields.json; the interop suite re-runs the
script, so a drift of the wheel shows there.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs
import pytest
from pydantic import BaseModel, ValidationError

import arthex.art as art
import arthex.art.trajectories as art_trajectories
from arthex.core.config import TrainConfig
from arthex.core.errors import InvalidInputError
from arthex.core.sft import TrainSFTConfig
from arthex.core.trajectories import History, Trajectory, TrajectoryGroup

RECORDED: dict[str, Any] = json.loads(
    (Path(__file__).parent / "data" / "art_0_5_23_fields.json").read_text()
)
ART_FIELDS: dict[str, dict[str, Any]] = RECORDED["fields"]

PYDANTIC: dict[str, type[BaseModel]] = {
    "Trajectory": Trajectory,
    "TrajectoryGroup": TrajectoryGroup,
    "LegacyHistory": History,
    "History": art_trajectories.History,
}
ATTRS = {"TrainConfig": TrainConfig, "TrainSFTConfig": TrainSFTConfig}


def arthex_fields(name: str) -> dict[str, Any]:
    """Field -> default (None for a factory or a required field), as the script records ART's."""
    if name in PYDANTIC:
        return {
            key: None if field.default_factory is not None or field.is_required() else field.default
            for key, field in PYDANTIC[name].model_fields.items()
        }
    found: dict[str, Any] = {}
    for field in attrs.fields(ATTRS[name]):
        plain = field.default is not attrs.NOTHING and not isinstance(field.default, attrs.Factory)  # type: ignore[arg-type]
        found[field.name] = field.default if plain else None
    return found


def test_the_recording_is_the_wheels() -> None:
    assert RECORDED["version"] == "0.5.23"
    assert set(ART_FIELDS) == {*PYDANTIC, *ATTRS}


@pytest.mark.parametrize("name", sorted({*PYDANTIC, *ATTRS}))
def test_every_field_of_art_is_a_field_of_arthex_with_arts_default(name: str) -> None:
    ours = arthex_fields(name)
    missing = sorted(set(ART_FIELDS[name]) - set(ours))
    assert not missing, f"{name} lacks ART's fields {missing}"
    defaults = {
        key: (ART_FIELDS[name][key], ours[key])
        for key in ART_FIELDS[name]
        if ours[key] != ART_FIELDS[name][key]
    }
    assert not defaults, f"{name}: ART's default vs arthex's {defaults}"
    if name in PYDANTIC:  # the data model is ART's exactly: a file either writes reads in both
        assert set(ours) == set(ART_FIELDS[name])


def test_a_group_as_art_sends_it_reads_back_with_every_value() -> None:
    sent = RECORDED["group"]
    group = TrajectoryGroup.model_validate(sent)
    (trajectory,) = group.trajectories
    assert (trajectory.initial_policy_version, trajectory.final_policy_version) == (3, 4)
    assert trajectory.reward == 1.0 and trajectory.metrics == {"correct": True, "tokens": 7}
    assert trajectory.additional_histories[0].messages_and_choices == [
        {"role": "user", "content": "aside"}
    ]
    assert len(list(trajectory.choices())) == 1
    assert [e.type for e in group.exceptions] == ["ValueError"]
    assert (group.metadata, group.metrics, group.logs) == ({"batch": 1}, {"pass": 0.5}, ["group"])
    # and what arthex sends of it carries the same values under the same names
    dumped = group.model_dump(mode="json")
    sent_trajectory, dumped_trajectory = sent["trajectories"][0], dumped["trajectories"][0]
    for key in sent_trajectory:
        if key != "messages_and_choices":  # Choice dumps differ only in the openai SDK's version
            assert set_values(dumped_trajectory[key]) == sent_trajectory[key], key


def set_values(value: Any) -> Any:
    """`value` less the None-valued keys of its objects (ART leaves an unset `tools` out)."""
    if isinstance(value, dict):
        return {k: set_values(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [set_values(v) for v in value]
    return value


def test_policy_versions_are_steps_and_start_time_is_not_serialized() -> None:
    trajectory = art.Trajectory(initial_policy_version=0, final_policy_version=2)
    assert trajectory.initial_policy_version == 0
    assert "start_time" not in trajectory.model_dump()
    with pytest.raises(ValidationError, match="initial_policy_version"):
        Trajectory(initial_policy_version=-1)
    with pytest.raises(ValidationError, match="final_policy_version"):
        Trajectory.model_validate({"final_policy_version": "two"})


def test_finish_records_the_seconds_since_start_time() -> None:
    began = datetime.now(UTC) - timedelta(seconds=30)
    naive = Trajectory(start_time=datetime(2026, 1, 1, 12, 0, 0))
    assert naive.start_time == datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    trajectory = Trajectory(start_time=began)
    assert trajectory.finish() is trajectory
    assert 30.0 <= trajectory.metrics["duration"] < 3600.0


def test_track_duration_adds_up_under_the_metric_name() -> None:
    trajectory = Trajectory(metrics={"tool_duration": 2.0})

    async def twice() -> None:
        async with trajectory.track_duration("tool"):
            pass
        async with trajectory.track_duration("tool"):
            pass

    asyncio.run(twice())
    assert 2.0 <= float(trajectory.metrics["tool_duration"]) < 60.0


def test_train_config_takes_arts_new_fields_with_arts_checks() -> None:
    config = TrainConfig(optimizer_save_interval=2, final_training_step=10)
    assert (config.optimizer_save_interval, config.final_training_step) == (2, 10)
    assert config.kl_penalty_source == "current_learner"
    with pytest.raises(InvalidInputError, match="optimizer_save_interval"):
        TrainConfig(optimizer_save_interval=0)
    with pytest.raises(InvalidInputError, match="final_training_step"):
        TrainConfig(final_training_step=0)
    with pytest.raises(InvalidInputError, match="kl_penalty_source='sample'"):
        TrainConfig(kl_penalty_source="sample")
    assert TrainConfig.model_validate({"kl_penalty_source": "current_learner"}) == TrainConfig()
