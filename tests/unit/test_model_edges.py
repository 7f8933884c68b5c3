"""Edges of the model's surface that mutation testing found unguarded: what a prompted model's
spec and step are, what the run state copies and says when refused, the names and clients a
model is served under, a train call from another backend, and which checkpoints a retention
decision reports as kept. Real files in tmp_path, the in-memory backend for training."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

import arthex as art
from arthex.core.errors import InvalidInputError, InvalidNameError, NotRegisteredError
from arthex.core.identity import ModelSpec, RunRef
from arthex.core.model import Model
from arthex.core.run_state import deep_merge
from arthex.ports.training_backend import InferenceEndpoint
from arthex.ports.trajectory_store import StateChange
from arthex.testing.builders import make_group, synthetic_groups
from arthex.testing.fakes.backend import InMemoryBackend
from tests.unit.test_art_model_surface import trainable as surface_trainable

from ._model_ports import ports_from

SAFE_SEGMENT_HINT = (
    "is not a safe path segment: use letters, digits, '_', '-' and '.', not starting with "
    "'.' or '-' (no slashes, '..', spaces or control characters)"
)


class DictRunState:
    """A RunStateStore that keeps the very dict it is given, as any in-memory store would."""

    def __init__(self) -> None:
        self.states: dict[RunRef, dict[str, Any]] = {}

    def read(self, run: RunRef) -> dict[str, Any] | None:
        return self.states.get(run)

    def update(self, run: RunRef, change: StateChange) -> dict[str, Any]:
        self.states[run] = change(self.states.get(run))
        return self.states[run]


def core_model(**kwargs: Any) -> Model:
    ports = ports_from(kwargs)
    return Model(name="m", project="p", ports=ports, **kwargs)


def prompted(tmp_path: Path, name: str = "m", **kwargs: Any) -> art.Model:
    return art.Model(name=name, project="p", base_path=str(tmp_path), report_metrics=[], **kwargs)


def trainable(tmp_path: Path) -> art.TrainableModel:
    return surface_trainable(tmp_path, name="m", project="p")


class ServingBackend(InMemoryBackend):
    async def register(self, model: ModelSpec) -> InferenceEndpoint | None:
        await super().register(model)
        return InferenceEndpoint(base_url="http://127.0.0.1:9/v1", api_key="k", model_name="m")


class OtherBackend(InMemoryBackend):
    pass


# -- a prompted model -------------------------------------------------------------------------


def test_a_prompted_models_spec_says_it_is_not_trainable_and_carries_its_path_and_config() -> None:
    model = core_model(base_path="/runs/here", config={"temperature": 0.5})
    assert model.spec() == ModelSpec(
        run=RunRef("p", "m"),
        base_model=None,
        trainable=False,
        base_path="/runs/here",
        config={"temperature": 0.5},
    )


def test_a_prompted_model_logs_at_step_zero(tmp_path: Path) -> None:
    async def main() -> None:
        model = prompted(tmp_path)
        assert await model.get_step() == 0
        row = await model.log([make_group((0.0, 1.0), prompt="a")], split="val")
        assert row is not None and row.step == 0
        assert len(await model.logged_groups("val", 0)) == 1

    asyncio.run(main())
    assert (tmp_path / "p" / "models" / "m" / "trajectories" / "val" / "0000.parquet").exists()


def test_reading_groups_back_refuses_a_bad_split_naming_it_a_split() -> None:
    with pytest.raises(InvalidNameError) as caught:
        asyncio.run(core_model().logged_groups("../x", 0))
    assert str(caught.value) == f"split '../x' {SAFE_SEGMENT_HINT}"


def test_a_prompted_client_needs_both_the_url_and_the_key_and_waits_twenty_minutes(
    tmp_path: Path,
) -> None:
    model = prompted(tmp_path, "gpt", inference_base_url="http://127.0.0.1:9/v1")
    with pytest.raises(InvalidInputError) as caught:
        model.openai_client()
    assert str(caught.value) == (
        "model 'gpt' has no inference endpoint: pass inference_base_url= and "
        "inference_api_key= (e.g. https://api.openai.com/v1 and your key)"
    )
    model.inference_api_key = "sk-test"
    assert model.openai_client().timeout == 1200.0  # seconds, as ART's client waits
    asyncio.run(model.close())


# -- run state --------------------------------------------------------------------------------


def test_deep_merge_replaces_a_missing_or_plain_value_with_the_nested_mapping() -> None:
    base = {"cursor": 3, "kept": {"a": 1}}
    updates = {"cursor": {"epoch": 1}, "new": {"b": {"c": 2}}, "kept": {"z": 0}}
    assert deep_merge(base, updates) == {
        "cursor": {"epoch": 1},
        "new": {"b": {"c": 2}},
        "kept": {"a": 1, "z": 0},
    }


def test_deep_merge_shares_no_nested_list_with_the_updates() -> None:
    updates: dict[str, Any] = {"seen": [[1, 2]], "tags": {"names": ["a"]}}
    merged = deep_merge({}, updates)
    updates["seen"][0].append(3)
    updates["tags"]["names"].append("b")
    assert merged == {"seen": [[1, 2]], "tags": {"names": ["a"]}}


def test_a_state_is_copied_when_stored_so_the_callers_later_changes_do_not_leak_in() -> None:
    states = DictRunState()
    model = core_model(state=states)
    state: dict[str, Any] = {"cursor": {"seen": [1, 2]}}
    model.overwrite_state(state)
    state["cursor"]["seen"].append(3)
    assert model.read_state() == {"cursor": {"seen": [1, 2]}}
    merge: dict[str, Any] = {"cursor": {"seen": [[5]]}}
    model.merge_state(merge)
    merge["cursor"]["seen"][0].append(6)
    assert model.read_state() == {"cursor": {"seen": [[5]]}}


def test_state_calls_name_themselves_and_the_type_they_refused(tmp_path: Path) -> None:
    model = prompted(tmp_path)
    with pytest.raises(InvalidInputError) as overwrite:
        model.overwrite_state([1])  # type: ignore[arg-type]
    assert str(overwrite.value) == "overwrite_state takes a dict, got list"
    with pytest.raises(InvalidInputError) as merge:
        model.merge_state("x")  # type: ignore[arg-type]
    assert str(merge.value) == "merge_state takes a dict, got str"
    assert model.read_state() is None


def test_write_state_says_which_calls_replace_it(tmp_path: Path) -> None:
    model = prompted(tmp_path)
    with pytest.warns(DeprecationWarning, match="write_state") as caught:
        model.write_state({"a": 1})
    assert [str(w.message) for w in caught] == [
        "write_state() is deprecated; use overwrite_state() or merge_state()"
    ]
    assert model.read_state() == {"a": 1}


def test_write_state_warns_from_the_callers_line(tmp_path: Path) -> None:
    model = prompted(tmp_path)
    with pytest.warns(DeprecationWarning, match="write_state") as caught:
        model.write_state({"a": 1})
    assert [w.filename for w in caught] == [__file__]


def test_a_model_without_a_state_store_says_how_to_get_one() -> None:
    with pytest.raises(InvalidInputError) as caught:
        core_model().read_state()
    assert str(caught.value) == (
        "model p/m was built without a state store; construct it through arthex.Model / "
        "arthex.TrainableModel, or pass state=JsonRunState(base_path)"
    )


# -- a trainable model: serving and backend.train ---------------------------------------------


def test_a_trainable_model_is_served_under_its_step_only_once_a_backend_serves_it(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        model = trainable(tmp_path)
        assert model.inference_model_name is None
        with pytest.raises(NotRegisteredError) as caught:
            model.openai_client()
        assert str(caught.value) == (
            "model p/m has no inference endpoint: register it with a backend that serves "
            "(e.g. LocalBackend) first"
        )
        await model.register(InMemoryBackend())  # trains, serves nothing
        assert model.inference_model_name is None
        served = trainable(tmp_path / "served")
        await served.register(ServingBackend())
        assert served.inference_model_name == "m@0"
        await served.train(synthetic_groups())
        assert served.inference_model_name == "m@1"
        await model.close()
        await served.close()

    asyncio.run(main())


def test_training_through_another_backend_names_both_backends(tmp_path: Path) -> None:
    async def main() -> None:
        model = trainable(tmp_path)
        await model.register(InMemoryBackend())
        with pytest.raises(InvalidInputError) as caught:
            await OtherBackend().train(model, synthetic_groups())
        assert str(caught.value) == (
            "model p/m is registered with InMemoryBackend, not with the OtherBackend asked to "
            "train it; call train on its own backend"
        )
        assert await model.get_step() == 0
        await model.close()

    asyncio.run(main())


def test_train_for_backend_is_quiet_unless_asked(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        model = trainable(tmp_path)
        backend = InMemoryBackend()
        await model.register(backend)
        with caplog.at_level(logging.INFO, logger="arthex"):
            result = await model.train_for_backend(backend, synthetic_groups(), art.TrainConfig())
        assert result.step == 1
        await model.close()

    asyncio.run(main())
    assert not [r for r in caplog.records if "trained step" in r.getMessage()]


# -- retention --------------------------------------------------------------------------------


def test_kept_steps_are_only_checkpoints_that_exist_and_the_reason_names_the_direction(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        model = trainable(tmp_path)
        backend = InMemoryBackend()
        await model.register(backend)
        for offset, loss in enumerate((0.9, 0.2, 0.5, 0.7)):  # logged at steps 0..3
            await model.log(metrics={"loss": loss}, split="val")
            await model.train(synthetic_groups(offset=offset))
        unknown = await model.delete_checkpoints("val/nothing", dry_run=True)
        assert unknown.reason == (
            "'val/nothing' was never logged for p/m, so the best checkpoint is unknown: "
            "nothing deleted"
        )
        # steps 0..4 exist; keep the last 2 (3, 4), the lowest loss (step 1) and pinned 9,
        # which was never saved: it is kept by the rule but is not a kept checkpoint
        preview = await model.delete_checkpoints(
            "val/loss", direction="min", keep_last=2, pinned=[9], dry_run=True
        )
        assert preview.reason == (
            "keep the last 2 step(s) up to 4, the best step 1 by min val/loss, and pinned steps [9]"
        )
        assert preview.keep == {1, 3, 4} and preview.deleted == (0, 2)
        done = await model.delete_checkpoints("val/loss", direction="min", keep_last=2, pinned=[9])
        assert done.keep == {1, 3, 4} and done.deleted == (0, 2)
        assert await backend.checkpoint_steps(model.run) == [1, 3, 4]
        await model.close()

    asyncio.run(main())
