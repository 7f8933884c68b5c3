"""The record ART 0.5.23's PipelineTrainer leaves in `state.json` (`_pipeline_trainer`, written by
its `_persist_state`), read by arthex's pipeline record store on real files: what it becomes,
that arthex's own record wins, and that a malformed field is refused naming the file and the
field, before the trainer writes anything. The e2e test (tests/interop/test_art_pipeline_resume.py)
has ART's own code write the record and arthex's trainer continue it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from arthex.adapters.run_files.art_pipeline import PIPELINE_STATE_KEY
from arthex.adapters.run_files.pipeline import JsonPipelineStateStore
from arthex.art.pipeline_trainer import trainer as art_trainer
from arthex.core.errors import CorruptDataError, NotRegisteredError
from arthex.core.identity import RunRef
from arthex.core.pipeline_record import PipelineRecord
from tests.unit._pipeline_world import RUN, Script, World

# what ART's _persist_state writes (key order and all), after an evaluation at step 4
ARTS = {
    "scenario_offset": 37,
    "total_scenarios_consumed": 37,
    "training_step": 5,
    "last_eval_step": 4,
    "completed_eval_steps": [0, 4],
    "accepted_trainable_groups": 20,
    "discarded_stale_groups": 3,
    "discarded_zero_variance_groups": 9,
    "pipeline_tuner_profile": "tuned",
}


def write_state(root: Path, run: RunRef, record: Any, **other: Any) -> Path:
    path = root / run.project / "models" / run.name / "state.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps({"dataset_offset": 3, PIPELINE_STATE_KEY: record, **other}, indent=2)
    )
    return path


def load(root: Path, run: RunRef = RUN) -> PipelineRecord | None:
    return asyncio.run(JsonPipelineStateStore(str(root)).load(run))


def test_the_key_is_arts() -> None:
    assert art_trainer.PIPELINE_STATE_KEY == PIPELINE_STATE_KEY == "_pipeline_trainer"


def test_arts_record_becomes_the_record_arthex_continues(tmp_path: Path) -> None:
    write_state(tmp_path, RUN, ARTS)
    record = load(tmp_path)
    assert record == PipelineRecord(
        step=5,
        offset=37,
        trained_groups=20,
        discarded_unlisted={"stale": 3, "zero_variance": 9},
        last_eval_step=4,
        evaluations_due=(),
        evaluated=(0, 4),
    )
    assert record.discarded_count() == 12 and record.discarded_count("stale") == 3
    # what arthex writes of it reads back the same
    again = PipelineRecord.from_json(json.loads(json.dumps(record.to_json())))
    assert again == record


def test_a_scheduled_evaluation_art_did_not_finish_is_due(tmp_path: Path) -> None:
    write_state(tmp_path, RUN, {**ARTS, "last_eval_step": 5, "completed_eval_steps": [0, 4]})
    record = load(tmp_path)
    assert record is not None
    assert (record.last_eval_step, record.evaluations_due) == (5, (5,))


def test_arts_zero_is_no_evaluation_unless_step_zero_finished(tmp_path: Path) -> None:
    write_state(tmp_path, RUN, {**ARTS, "last_eval_step": 0, "completed_eval_steps": []})
    record = load(tmp_path)
    assert record is not None and (record.last_eval_step, record.evaluations_due) == (None, ())
    write_state(tmp_path, RUN, {**ARTS, "last_eval_step": 0, "completed_eval_steps": [0]})
    record = load(tmp_path)
    assert record is not None and (record.last_eval_step, record.evaluated) == (0, (0,))


def test_missing_and_null_counts_are_zero_as_for_art(tmp_path: Path) -> None:
    write_state(tmp_path, RUN, {"scenario_offset": 4, "discarded_stale_groups": None})
    assert load(tmp_path) == PipelineRecord(step=0, offset=4)


def test_no_key_and_no_file_are_no_record(tmp_path: Path) -> None:
    assert load(tmp_path) is None
    path = write_state(tmp_path, RUN, None)
    path.write_text(json.dumps({"dataset_offset": 3}))
    assert load(tmp_path) is None


def test_arthexs_own_record_wins(tmp_path: Path) -> None:
    store = JsonPipelineStateStore(str(tmp_path))
    write_state(tmp_path, RUN, ARTS)
    asyncio.run(store.save(RUN, PipelineRecord(step=7, offset=50)))
    assert load(tmp_path) == PipelineRecord(step=7, offset=50)


BAD_FIELDS = [
    ("scenario_offset", "37"),
    ("scenario_offset", -1),
    ("scenario_offset", 3.0),
    ("total_scenarios_consumed", True),
    ("training_step", [5]),
    ("last_eval_step", -4),
    ("accepted_trainable_groups", 2.5),
    ("discarded_stale_groups", "3"),
    ("discarded_zero_variance_groups", {"n": 9}),
    ("completed_eval_steps", "0,4"),
    ("completed_eval_steps", [0, "4"]),
    ("completed_eval_steps", [-1]),
    ("completed_eval_steps", {"0": True}),
    ("pipeline_tuner_profile", 3),
]


@pytest.mark.parametrize(("field", "value"), BAD_FIELDS)
def test_a_malformed_field_is_refused_naming_the_file_and_the_field(
    tmp_path: Path, field: str, value: Any
) -> None:
    path = write_state(tmp_path, RUN, {**ARTS, field: value})
    with pytest.raises(CorruptDataError) as caught:
        load(tmp_path)
    message = str(caught.value)
    assert str(path) in message and repr(field) in message and PIPELINE_STATE_KEY in message


@pytest.mark.parametrize("record", [[1, 2], "offset=3", 37])
def test_a_record_that_is_not_an_object_is_refused(tmp_path: Path, record: Any) -> None:
    path = write_state(tmp_path, RUN, record)
    with pytest.raises(CorruptDataError, match="not a JSON object") as caught:
        load(tmp_path)
    assert str(path) in str(caught.value)


def test_the_trainer_refuses_it_before_writing_anything(tmp_path: Path) -> None:
    path = write_state(tmp_path, RUN, {**ARTS, "scenario_offset": "37"})
    before = path.read_bytes()
    world = World()
    trainer = world.trainer(Script(), range(10), min_batch_size=1, max_steps=1)
    trainer._state_store = JsonPipelineStateStore(str(tmp_path))
    with pytest.raises(CorruptDataError, match="'scenario_offset'"):
        asyncio.run(trainer.train())
    assert sorted(p.name for p in path.parent.iterdir()) == ["state.json"]
    assert path.read_bytes() == before
    with pytest.raises(NotRegisteredError):  # not even registered
        asyncio.run(world.backend.get_step(RUN))


def test_resume_false_does_not_read_it(tmp_path: Path) -> None:
    write_state(tmp_path, RUN, {**ARTS, "scenario_offset": "37"})
    world = World()
    script = Script()
    trainer = world.trainer(script, range(4), min_batch_size=1, max_steps=1, resume=False)
    trainer._state_store = JsonPipelineStateStore(str(tmp_path))
    asyncio.run(trainer.train())
    assert min(script.sampled) == 0


def test_arts_evaluated_steps_are_evaluated_checkpoints_for_a_retention_strategy() -> None:
    from arthex.core.pipeline.retention_strategy import checkpoint_infos

    infos = checkpoint_infos([1, 4, 5], [], lambda step: f"agent@{step}", evaluated=(0, 4))
    assert [(i.step, i.is_eval_step) for i in infos] == [(1, False), (4, True), (5, False)]
