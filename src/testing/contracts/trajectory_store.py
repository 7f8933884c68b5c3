"""The TrajectoryStore contract: subclass, override the `store` fixture, get the whole suite.

    class TestMyStore(TrajectoryStoreContract):
        @pytest.fixture
        def store(self, tmp_path):
            return MyStore(tmp_path)

Each test gets a fresh, empty store from the fixture.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest
from openai.types.chat.chat_completion import Choice

from ...core.errors import InvalidInputError, InvalidNameError
from ...core.identity import ModelSpec, RunRef
from ...core.trajectories import Trajectory, TrajectoryGroup
from ...ports.trajectory_store import TrajectoryStore
from ..builders import make_group, make_trajectory, rich_groups

T = TypeVar("T")

RUN = RunRef("contract-project", "contract-run")
OTHER_RUN = RunRef("contract-project", "other-run")
OTHER_PROJECT_RUN = RunRef("other-project", "contract-run")
BAD_SPLITS = [
    "",
    ".",
    "..",
    "../escape",
    "a/b",
    ".hidden",
    "-flag",
    "with space",
    "tab\t",
    "x" * 129,
]


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coroutine)


def _dumps(groups: list[TrajectoryGroup]) -> list[str]:
    return [group.model_dump_json() for group in groups]


def _assert_same_types(expected: dict[str, Any], actual: dict[str, Any], where: str) -> None:
    """`True == 1 == 1.0` in Python, so equality alone would let a bool come back as a float."""
    assert list(actual) == list(expected), where
    for key, value in expected.items():
        assert type(actual[key]) is type(value), f"{where}[{key!r}]: {actual[key]!r} != {value!r}"


def assert_groups_identical(expected: list[TrajectoryGroup], actual: list[TrajectoryGroup]) -> None:
    """Equal values, equal JSON, and the same Python types for every scalar and item."""
    assert len(actual) == len(expected)
    assert actual == expected
    assert _dumps(actual) == _dumps(expected)
    for g, (want, got) in enumerate(zip(expected, actual)):
        assert type(got) is TrajectoryGroup
        _assert_same_types(want.metrics, got.metrics, f"groups[{g}].metrics")
        _assert_same_types(want.metadata, got.metadata, f"groups[{g}].metadata")
        assert got.exceptions == want.exceptions
        for t, (want_t, got_t) in enumerate(zip(want.trajectories, got.trajectories)):
            where = f"groups[{g}].trajectories[{t}]"
            assert type(got_t) is Trajectory
            assert type(got_t.reward) is float, where
            _assert_same_types(want_t.metrics, got_t.metrics, f"{where}.metrics")
            _assert_same_types(want_t.metadata, got_t.metadata, f"{where}.metadata")
            conversations = [(want_t.messages_and_choices, got_t.messages_and_choices)] + [
                (w.messages_and_choices, a.messages_and_choices)
                for w, a in zip(want_t.additional_histories, got_t.additional_histories)
            ]
            for want_items, got_items in conversations:
                assert [type(item) for item in got_items] == [type(item) for item in want_items]
                for want_item, got_item in zip(want_items, got_items):
                    if isinstance(want_item, Choice):
                        assert isinstance(got_item, Choice)
                        assert got_item.model_extra == want_item.model_extra, where
                        assert got_item.logprobs == want_item.logprobs, where
                        assert got_item.message.model_extra == want_item.message.model_extra


class TrajectoryStoreContract:
    """What every TrajectoryStore does. Override `store`; the tests are synchronous and drive
    the store with `asyncio.run`, so no async test plugin is needed."""

    @pytest.fixture
    def store(self) -> TrajectoryStore:
        raise NotImplementedError("override the `store` fixture to return a fresh, empty store")

    # --- round trip ---------------------------------------------------------------------------

    def test_round_trip_keeps_every_field(self, store: TrajectoryStore) -> None:
        groups = rich_groups()
        location = run(store.write(RUN, "train", 3, groups))
        assert isinstance(location, str)
        assert location
        back = run(store.read(RUN, "train", 3))
        assert_groups_identical(groups, back)

    def test_round_trip_details_survive(self, store: TrajectoryStore) -> None:
        run(store.write(RUN, "val", 0, rich_groups()))
        rich, all_failed, empty, minimal, multimodal = run(store.read(RUN, "val", 0))
        first = rich.trajectories[0]
        call = first.messages_and_choices[2]
        assert isinstance(call, Choice)
        assert call.message.content is None
        assert call.message.tool_calls is not None
        assert call.message.tool_calls[0].id == "call_0"
        assert call.model_extra == {"token_ids": [101, 102, 103], "prompt_token_ids": [1, 2, 3, 4]}
        assert call.logprobs is not None
        assert call.logprobs.content is not None
        assert [lp.logprob for lp in call.logprobs.content] == [-0.25, -1.5, -3.0e-7]
        assert [lp.token for lp in call.logprobs.content] == [
            "token_id:101",
            "token_id:102",
            "token_id:103",
        ]
        assert first.tools is not None
        assert first.tools[0]["function"]["name"] == "get_weather"
        assert isinstance(first.additional_histories[0].messages_and_choices[2], Choice)
        assert first.additional_histories[1].messages_and_choices == []
        assert first.metrics["correct"] is True
        assert first.metrics["flag"] is False
        assert type(first.metrics["turns"]) is int
        assert first.metadata["note"] is None
        assert [e.type for e in rich.exceptions] == ["TimeoutError"]
        assert "timeout" in rich.exceptions[0].message
        assert "Traceback" in rich.exceptions[0].traceback
        assert rich.metrics == {"solved": True, "attempts": 2, "mean_len": 12.5}
        assert all_failed.trajectories == []
        assert [e.type for e in all_failed.exceptions] == ["ValueError", "KeyError"]
        assert all_failed.logs == ["every rollout failed"]
        assert empty == TrajectoryGroup()
        assert minimal.trajectories == [Trajectory()]
        assert multimodal.trajectories[1].tools == []
        assert multimodal.trajectories[0].tools is None

    def test_non_finite_metrics_survive(self, store: TrajectoryStore) -> None:
        trajectory = make_trajectory(1.0, metrics={"nan": math.nan, "inf": math.inf})
        group = TrajectoryGroup([trajectory], metrics={"neg_inf": -math.inf})
        run(store.write(RUN, "train", 0, [group]))
        (back,) = run(store.read(RUN, "train", 0))
        assert math.isnan(back.trajectories[0].metrics["nan"])
        assert back.trajectories[0].metrics["inf"] == math.inf
        assert back.metrics["neg_inf"] == -math.inf

    def test_read_returns_copies(self, store: TrajectoryStore) -> None:
        group = make_group([0.0, 1.0], metadata={"k": "v"})
        run(store.write(RUN, "train", 0, [group]))
        group.metadata["k"] = "changed after write"
        group.trajectories[0].logs.append("changed after write")
        (first,) = run(store.read(RUN, "train", 0))
        first.metadata["k"] = "changed after read"
        (second,) = run(store.read(RUN, "train", 0))
        assert second.metadata == {"k": "v"}
        assert second.trajectories[0].logs == []

    def test_empty_batch_is_a_part_without_groups(self, store: TrajectoryStore) -> None:
        run(store.write(RUN, "train", 4, []))
        assert run(store.steps(RUN, "train")) == [4]
        assert run(store.read(RUN, "train", 4)) == []

    # --- parts --------------------------------------------------------------------------------

    def test_second_write_at_same_step_keeps_both_batches_in_order(
        self, store: TrajectoryStore
    ) -> None:
        first = [make_group([0.0, 1.0], metadata={"batch": 1})]
        second = [make_group([0.5], metadata={"batch": 2}), make_group([], metadata={"batch": 3})]
        assert run(store.write(RUN, "val", 7, first))
        assert run(store.write(RUN, "val", 7, second))
        assert_groups_identical(first + second, run(store.read(RUN, "val", 7)))
        assert run(store.steps(RUN, "val")) == [7]

    def test_parts_read_back_in_write_order(self, store: TrajectoryStore) -> None:
        for batch in range(5):
            run(store.write(RUN, "train", 0, [make_group([float(batch)], metadata={"b": batch})]))
        back = run(store.read(RUN, "train", 0))
        assert [g.metadata["b"] for g in back] == [0, 1, 2, 3, 4]

    def test_concurrent_writes_at_one_step_all_survive(self, store: TrajectoryStore) -> None:
        async def write_all() -> list[str]:
            return await asyncio.gather(
                *(
                    store.write(RUN, "train", 2, [make_group([0.0, 1.0], metadata={"w": w})])
                    for w in range(6)
                )
            )

        locations = run(write_all())
        assert all(locations)
        back = run(store.read(RUN, "train", 2))
        assert sorted(int(str(g.metadata["w"])) for g in back) == list(range(6))

    # --- steps --------------------------------------------------------------------------------

    def test_steps_lists_steps_with_parts_in_ascending_order(self, store: TrajectoryStore) -> None:
        for step in (12, 0, 3, 3, 10_000):
            run(store.write(RUN, "train", step, [make_group()]))
        run(store.write(RUN, "val", 5, [make_group()]))
        assert run(store.steps(RUN, "train")) == [0, 3, 12, 10_000]
        assert run(store.steps(RUN, "val")) == [5]
        assert run(store.steps(RUN, "test")) == []
        assert len(run(store.read(RUN, "train", 10_000))) == 1

    def test_runs_and_splits_are_isolated(self, store: TrajectoryStore) -> None:
        run(store.write(RUN, "train", 1, [make_group(metadata={"who": "run"})]))
        run(store.write(OTHER_RUN, "train", 1, [make_group(metadata={"who": "other"})]))
        run(store.write(OTHER_PROJECT_RUN, "train", 1, [make_group(metadata={"who": "project"})]))
        run(store.write(RUN, "val", 1, [make_group(metadata={"who": "val"})]))
        assert [g.metadata["who"] for g in run(store.read(RUN, "train", 1))] == ["run"]
        assert [g.metadata["who"] for g in run(store.read(OTHER_RUN, "train", 1))] == ["other"]
        who = [g.metadata["who"] for g in run(store.read(OTHER_PROJECT_RUN, "train", 1))]
        assert who == ["project"]
        assert [g.metadata["who"] for g in run(store.read(RUN, "val", 1))] == ["val"]

    def test_unknown_run_reads_as_nothing(self, store: TrajectoryStore) -> None:
        never = RunRef("never-written", "nobody")
        assert run(store.read(never, "train", 0)) == []
        assert run(store.steps(never, "train")) == []
        run(store.write(RUN, "train", 1, [make_group()]))
        assert run(store.read(RUN, "train", 0)) == []

    # --- bad input ----------------------------------------------------------------------------

    @pytest.mark.parametrize("split", BAD_SPLITS)
    def test_bad_split_is_refused_and_nothing_is_written(
        self, store: TrajectoryStore, split: str
    ) -> None:
        with pytest.raises(InvalidNameError):
            run(store.write(RUN, split, 0, [make_group()]))
        with pytest.raises(InvalidNameError):
            run(store.read(RUN, split, 0))
        with pytest.raises(InvalidNameError):
            run(store.steps(RUN, split))
        for good in ("train", "val", "escape", "b", "hidden", "flag"):
            assert run(store.steps(RUN, good)) == []

    @pytest.mark.parametrize("step", [-1, -100, 1.0, "3", None, True])
    def test_bad_step_is_refused(self, store: TrajectoryStore, step: Any) -> None:
        with pytest.raises(InvalidInputError, match="step"):
            run(store.write(RUN, "train", step, [make_group()]))
        with pytest.raises(InvalidInputError, match="step"):
            run(store.read(RUN, "train", step))
        assert run(store.steps(RUN, "train")) == []

    def test_items_that_are_not_groups_are_refused(self, store: TrajectoryStore) -> None:
        bad: list[Any] = [
            [make_trajectory(1.0)],
            [make_group(), {"trajectories": []}],
            make_group(),
        ]
        for groups in bad:
            with pytest.raises(InvalidInputError):
                run(store.write(RUN, "train", 0, groups))
        assert run(store.steps(RUN, "train")) == []

    def test_unserializable_group_is_refused_and_earlier_parts_are_kept(
        self, store: TrajectoryStore
    ) -> None:
        good = [make_group([0.0, 1.0], metadata={"batch": "good"})]
        run(store.write(RUN, "train", 0, good))
        broken = make_group([1.0])
        broken.metadata["bad"] = object()  # type: ignore[assignment]
        with pytest.raises(InvalidInputError, match=r"groups\[1\]"):
            run(store.write(RUN, "train", 0, [make_group(), broken]))
        not_text = make_trajectory(0.0, messages=[{"role": "user", "content": "lone \ud800"}])
        with pytest.raises(InvalidInputError, match=r"groups\[0\]"):
            run(store.write(RUN, "train", 0, [TrajectoryGroup([not_text])]))
        assert_groups_identical(good, run(store.read(RUN, "train", 0)))
        assert run(store.steps(RUN, "train")) == [0]

    # --- model spec ---------------------------------------------------------------------------

    def test_model_spec_can_be_written_and_replaced(self, store: TrajectoryStore) -> None:
        assert run(store.read_model_spec(RUN)) is None
        first = ModelSpec(RUN, base_model="tiny", config={"lr": 1e-5, "tags": ["a", "ü"]})
        run(store.write_model_spec(first))
        assert run(store.read_model_spec(RUN)) == {
            "project": RUN.project,
            "name": RUN.name,
            "base_model": "tiny",
            "trainable": True,
            "config": {"lr": 1e-5, "tags": ["a", "ü"]},
        }
        second = ModelSpec(RUN, base_model="tiny-2", trainable=False)
        run(store.write_model_spec(second))
        assert run(store.read_model_spec(RUN)) == second.to_json()
        assert run(store.read_model_spec(OTHER_RUN)) is None

    def test_model_spec_with_unserializable_config_is_refused(self, store: TrajectoryStore) -> None:
        kept = ModelSpec(RUN, base_model="tiny")
        run(store.write_model_spec(kept))
        with pytest.raises(InvalidInputError):
            run(store.write_model_spec(ModelSpec(RUN, config={"bad": object()})))
        assert run(store.read_model_spec(RUN)) == kept.to_json()
