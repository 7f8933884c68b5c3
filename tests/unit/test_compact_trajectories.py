"""The compact envelope and `compact_memory` under `arthex.art.trajectories`, on worked examples
(tests/interop/test_art_compact_trajectories.py checks ART reads and writes the same)."""

from __future__ import annotations

import asyncio
import json

import pytest

from arthex.art.trajectories import (
    TokenizedTrajectory,
    compact_dump,
    compact_memory,
    compact_validate,
    compact_validate_json,
    tokenize,
)
from arthex.core.errors import InvalidInputError
from arthex.core.trajectories import Trajectory, TrajectoryGroup

from .test_tokenized_trajectories import two_turns

LONG = "a sentence long enough to be worth a reference"


def test_a_repeated_string_becomes_a_reference_and_a_literal_dollar_is_never_shadowed() -> None:
    trajectory = Trajectory(messages_and_choices=[{"role": "user", "content": LONG}] * 3,
                            metadata={"note": "$0"})  # fmt: skip
    payload = compact_dump(trajectory)
    assert payload["format"] == "art.trajectories" and payload["version"] == 1
    assert payload["kind"] == "trajectory"
    assert "$0" not in payload["strings"]  # "$0" is a literal here
    assert LONG in payload["strings"].values() and LONG not in json.dumps(payload["data"])
    back = compact_validate_json(json.dumps(payload))
    assert back == trajectory and back.metadata["note"] == "$0"


def test_a_table_not_worth_it_is_left_out() -> None:
    payload = compact_dump(Trajectory(reward=0.5))
    assert payload["strings"] == {} and payload["data"]["reward"] == 0.5


def test_collections_are_plural_and_must_be_of_one_kind() -> None:
    trajectories = [Trajectory(reward=1.0), Trajectory(reward=2.0)]
    payload = compact_dump(trajectories)
    assert payload["kind"] == "trajectories"
    assert compact_validate(payload, type=list[Trajectory]) == trajectories
    with pytest.raises(TypeError, match="homogeneous"):
        compact_dump([Trajectory(), TrajectoryGroup([])])
    with pytest.raises(ValueError, match="empty iterable"):
        compact_dump([])


def test_a_tokenized_group_writes_each_trajectory_once() -> None:
    [group] = asyncio.run(tokenize([TrajectoryGroup([two_turns(0.0), two_turns(1.0)])], model="m"))
    payload = compact_dump(group)
    table = payload["strings"]
    children = next(v for k, v in payload["data"].items() if table.get(k, k) == "trajectories")
    assert len(children) == 2
    assert all(table.get(k, k) != "trajectory" for child in children for k in child)
    back = compact_validate(json.loads(json.dumps(payload)))
    assert [t.tokens for t in back.trajectories] == [t.tokens for t in group.trajectories]
    assert back.trajectories[1].trajectory is back.trajectory_group.trajectories[1]
    one = compact_validate(compact_dump(group.trajectories[0]), type=TokenizedTrajectory)
    assert one.flags == group.trajectories[0].flags
    with pytest.raises(ValueError, match="NaN"):  # a prompt token's logprob
        compact_validate_json(json.dumps(compact_dump(group)))


def test_bad_envelopes_are_refused() -> None:
    payload = compact_dump(Trajectory())
    with pytest.raises(InvalidInputError, match="exactly format"):
        compact_validate({**payload, "extra": 1})
    with pytest.raises(InvalidInputError, match="format"):
        compact_validate({**payload, "format": "other"})
    with pytest.raises(InvalidInputError, match="expects kind 'trajectory_group'"):
        compact_validate(payload, type=TrajectoryGroup)
    with pytest.raises(InvalidInputError, match="device is only valid"):
        compact_validate(payload, device="cpu")
    with pytest.raises(InvalidInputError, match="string reference"):
        compact_validate({**payload, "strings": {"$01": "x"}})


def test_tensorized_values_read_back_onto_a_device() -> None:
    pytest.importorskip("torch")
    [group] = asyncio.run(tokenize([TrajectoryGroup([two_turns()])], model="m"))
    tensors = group.tensorize()
    back = compact_validate(json.loads(json.dumps(compact_dump(tensors))), device="cpu")
    assert back.trajectories[0].tokens.tolist() == [1, 2, 7, 8, 3, 9]
    assert type(back).__name__ == "TensorizedTrajectoryGroup[TensorizedTrajectory]"


def test_compact_memory_shares_equal_strings_in_place() -> None:
    words = ["".join(["sha", "red"]) for _ in range(2)]
    assert words[0] is not words[1]
    trajectory = Trajectory(
        messages_and_choices=[{"role": "user", "content": w} for w in words],
        metadata={"a": "".join(["sha", "red"])},
    )
    assert compact_memory(trajectory) is trajectory
    first, second = trajectory.messages_and_choices
    assert isinstance(first, dict) and isinstance(second, dict)
    assert first["content"] is second["content"] is trajectory.metadata["a"]
