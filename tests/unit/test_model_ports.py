"""A model is built from one value of its ports: the three roles' adapters injected by hand
(store, reporter, and the backend at register) reach the use cases, and the composition root
builds the defaults once."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import arthex
from arthex.composition.api import model_ports
from arthex.core.errors import InvalidInputError
from arthex.core.identity import RunRef
from arthex.core.model import ModelPorts
from arthex.testing.builders import make_group
from arthex.testing.fakes import InMemoryBackend
from arthex.testing.fakes.history import InMemoryHistory
from arthex.testing.fakes.stores import InMemoryTrajectoryStore

RUN = RunRef("p", "m")


def test_an_embedded_model_works_through_the_three_adapters_it_is_given(tmp_path: Path) -> None:
    store, reporter, backend = InMemoryTrajectoryStore(), InMemoryHistory(), InMemoryBackend()
    model = arthex.TrainableModel(
        name="m",
        project="p",
        base_model="tiny",
        base_path=str(tmp_path),
        report_metrics=[],
        store=store,
        reporter=reporter,
    )

    async def main() -> int:
        await model.register(backend)
        await model.train([make_group((0.0, 1.0)), make_group((1.0, 0.0))])
        await model.log([make_group((0.5, 0.25))], split="val")
        step = await backend.get_step(RUN)
        await backend.close()
        return step

    assert asyncio.run(main()) == 1
    assert model.ports.store is store and model.ports.reporter is reporter
    assert asyncio.run(store.steps(RUN, "train")) == [0]
    assert asyncio.run(store.steps(RUN, "val")) == [1]
    rows = asyncio.run(reporter.rows(RUN))
    assert {row.step for row in rows} == {0, 1}
    assert any("loss/train" in row.values for row in rows)
    assert not (tmp_path / "p" / "models" / "m" / "history.jsonl").exists()


def test_the_composition_root_builds_the_defaults_once_and_a_built_value_is_taken_as_is(
    tmp_path: Path,
) -> None:
    ports = model_ports(str(tmp_path), report_metrics=[])
    assert isinstance(ports, ModelPorts)
    assert ports.mirrors == () and ports.state is not None and ports.leases is not None
    model = arthex.TrainableModel(name="m", project="p", base_model="tiny", ports=ports)
    assert model.ports is ports
    plain = arthex.Model(name="m", project="p", ports=ports)
    assert plain.ports is ports


def test_the_trainable_model_is_a_model_with_no_class_layer_between() -> None:
    from arthex.core import model, trainable

    assert trainable.TrainableModel.__bases__ == (model.Model,)
    assert issubclass(arthex.TrainableModel, arthex.Model)  # as in ART


def test_adapters_come_in_ports_or_one_by_one_never_both(tmp_path: Path) -> None:
    ports = model_ports(str(tmp_path), report_metrics=[])
    with pytest.raises(InvalidInputError, match="either in ports= or one by one"):
        arthex.TrainableModel(
            name="m", project="p", base_model="tiny", ports=ports, reporter=InMemoryHistory()
        )
    with pytest.raises(InvalidInputError, match="either in ports= or one by one"):
        arthex.Model(name="m", project="p", ports=ports, store=InMemoryTrajectoryStore())


def test_the_pipeline_keeps_its_record_in_the_models_ports_facet(tmp_path: Path) -> None:
    """arthex.PipelineTrainer is the core's: its record goes where the model's ports keep
    it (pipeline_state.json by default), and a model whose ports keep none is told so."""
    from arthex.core.model import ModelPorts
    from arthex.core.pipeline import PipelineTrainer
    from arthex.core.trainable import TrainableModel
    from arthex.testing.fakes.pipeline_state import InMemoryPipelineStateStore

    async def rollout(model: object, scenario: int, config: None) -> object:
        raise AssertionError("not called")

    assert arthex.PipelineTrainer is PipelineTrainer
    kept = InMemoryPipelineStateStore()
    ports = ModelPorts(InMemoryTrajectoryStore(), InMemoryHistory(), pipeline_state=kept)
    model = TrainableModel(name="m", project="p", base_model="tiny", ports=ports)
    trainer = PipelineTrainer(model, InMemoryBackend(), rollout, [1], None)  # type: ignore[arg-type]
    assert trainer._state_store is kept  # the facet, not a default file store
    bare = TrainableModel(
        name="m",
        project="p",
        base_model="tiny",
        ports=ModelPorts(InMemoryTrajectoryStore(), InMemoryHistory()),
    )
    with pytest.raises(InvalidInputError, match="keep no pipeline record: pass state_store="):
        PipelineTrainer(bare, InMemoryBackend(), rollout, [1], None)  # type: ignore[arg-type]
    public = arthex.TrainableModel(
        name="m", project="p", base_model="tiny", base_path=str(tmp_path), report_metrics=[]
    )
    assert public.ports.pipeline_state is not None
