"""The analysis loaders read back exactly what the file adapters wrote."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import arthex
from arthex.adapters.jsonl_history import JsonlHistory, encode_row
from arthex.adapters.parquet.store import ParquetTrajectoryStore
from arthex.apps.loaders import list_parts, load_history, load_trajectories, model_dir
from arthex.core.errors import CorruptDataError, InvalidInputError, InvalidNameError
from arthex.core.identity import RunRef
from arthex.core.metrics import MetricsRow
from arthex.core.trajectories import TrajectoryGroup
from arthex.testing.builders import make_choice, make_exception, make_group, make_trajectory
from tests._parts import write_legacy_part

RUN = RunRef("proj", "agent")
T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)


def model_path(base: Path) -> Path:
    return base / RUN.project / "models" / RUN.name


def write(base: Path, split: str, step: int, groups: list[TrajectoryGroup]) -> None:
    asyncio.run(ParquetTrajectoryStore(str(base)).write(RUN, split, step, groups))


def report(base: Path, *rows: MetricsRow) -> None:
    async def go() -> None:
        history = JsonlHistory(str(base))
        for row in rows:
            await history.report(RUN, row)

    asyncio.run(go())


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """train at steps 0 and 1 (step 1 written twice by an earlier arthex: a step file and a
    legacy part), val at step 1."""
    write(tmp_path, "train", 0, [make_group([0.0, 1.0]), make_group([0.5])])
    write(tmp_path, "train", 1, [make_group([0.25, 0.75])])
    split_dir = model_path(tmp_path) / "trajectories" / "train"
    write_legacy_part(split_dir, 1, 1, [make_group([2.0], exceptions=[make_exception("boom")])])
    write(tmp_path, "val", 1, [make_group([0.125, 0.375, 0.625])])
    return model_path(tmp_path)


# --- trajectories ---------------------------------------------------------------------------


def test_every_part_is_read_with_its_split_step_and_part(run_dir: Path) -> None:
    frame = load_trajectories(run_dir)
    assert isinstance(frame, pl.LazyFrame)
    rows = frame.select("split", "step", "part", "group_index", "reward").collect().rows()
    assert rows == [
        ("train", 0, 0, 0, 0.0),
        ("train", 0, 0, 0, 1.0),
        ("train", 0, 0, 1, 0.5),
        ("train", 1, 0, 0, 0.25),
        ("train", 1, 0, 0, 0.75),
        ("train", 1, 1, 0, 2.0),
        ("val", 1, 0, 0, 0.125),
        ("val", 1, 0, 0, 0.375),
        ("val", 1, 0, 0, 0.625),
    ]
    schema = frame.collect_schema()
    assert schema["split"] == pl.String
    assert schema["step"] == pl.Int64
    assert schema["part"] == pl.Int64
    assert schema["reward"] == pl.Float64


def test_analytics_columns_hold_the_conversation(tmp_path: Path) -> None:
    call = make_choice(None, tool_calls=[{"name": "get_weather", "arguments": '{"city": "Oslo"}'}])
    trajectory = make_trajectory(
        1.0,
        messages=[{"role": "user", "content": "Weather?"}, call],
        metrics={"called_tool": True},
    )
    write(tmp_path, "train", 3, [TrajectoryGroup([trajectory])])
    row = load_trajectories(model_path(tmp_path)).collect().row(0, named=True)
    assert row["step"] == 3
    assert json.loads(row["metrics"]) == {"called_tool": True}
    roles = [(m["role"], m["trainable"]) for m in row["messages"]]
    assert roles == [("user", False), ("assistant", True)]
    assert json.loads(row["messages"][1]["tool_calls"])[0]["function"]["name"] == "get_weather"
    assert arthex.Trajectory.model_validate_json(row["trajectory_json"]) == trajectory


def test_split_and_steps_choose_the_parts(run_dir: Path) -> None:
    def read(**kwargs: object) -> list[tuple[str, int, int]]:
        frame = load_trajectories(run_dir, **kwargs)  # type: ignore[arg-type]
        return sorted(set(frame.select("split", "step", "part").collect().rows()))

    assert read(split="val") == [("val", 1, 0)]
    assert read(split=["val", "train"], steps=1) == [
        ("train", 1, 0),
        ("train", 1, 1),
        ("val", 1, 0),
    ]
    assert read(steps=range(0, 1)) == [("train", 0, 0)]
    assert read(steps=[7]) == []
    assert read(split="test") == []


def test_a_model_without_trajectories_is_an_empty_frame_with_the_schema(tmp_path: Path) -> None:
    report(tmp_path, MetricsRow(step=0, values={"val/reward": 1.0}))
    frame = load_trajectories(model_path(tmp_path)).collect()
    assert frame.height == 0
    assert {"reward", "messages", "split", "step", "part"} <= set(frame.columns)
    assert frame.schema["step"] == pl.Int64


def test_unpublished_and_foreign_files_are_skipped(run_dir: Path) -> None:
    split = run_dir / "trajectories" / "train"
    (split / ".tmp-0005.parquet.123.abcd").write_bytes(b"half written")
    (split / "12.parquet").write_bytes(b"not a name the store writes")
    (split / "notes.txt").write_text("hello")
    (run_dir / "trajectories" / ".hidden").mkdir()
    assert [(s, st, p) for s, st, p, _ in list_parts(run_dir)] == [
        ("train", 0, 0),
        ("train", 1, 0),
        ("train", 1, 1),
        ("val", 1, 0),
    ]
    assert load_trajectories(run_dir).collect().height == 9


def test_a_part_of_an_unknown_layout_version_is_refused(run_dir: Path) -> None:
    table = pq.read_table(run_dir / "trajectories" / "val" / "0001.parquet")
    table = table.replace_schema_metadata({b"art.trajectory_parquet.version": b"3"})
    pq.write_table(table, run_dir / "trajectories" / "val" / "0002.parquet")
    with pytest.raises(CorruptDataError, match=r"0002\.parquet.*version '3'"):
        load_trajectories(run_dir)
    assert load_trajectories(run_dir, steps=[0, 1]).collect().height == 9


def test_a_file_that_is_not_parquet_is_refused(run_dir: Path) -> None:
    (run_dir / "trajectories" / "val" / "0004.parquet").write_bytes(b"garbage")
    with pytest.raises(CorruptDataError, match=r"0004\.parquet"):
        load_trajectories(run_dir, split="val")


def test_a_v1_file_without_version_metadata_is_refused(run_dir: Path) -> None:
    pq.write_table(pa.table({"reward": [1.0]}), run_dir / "trajectories" / "val" / "0009.parquet")
    with pytest.raises(CorruptDataError, match="no version"):
        load_trajectories(run_dir)


def test_a_model_object_reads_the_same_as_its_directory(run_dir: Path, tmp_path: Path) -> None:
    model = arthex.Model(
        name=RUN.name, project=RUN.project, base_path=str(tmp_path), report_metrics=[]
    )
    assert model_dir(model) == run_dir
    by_model = load_trajectories(model).collect()
    by_path = load_trajectories(str(run_dir)).collect()
    assert by_model.equals(by_path)


def test_wrong_paths_are_explained(tmp_path: Path, run_dir: Path) -> None:
    with pytest.raises(InvalidInputError, match="not a directory"):
        load_trajectories(tmp_path / "missing")
    with pytest.raises(InvalidInputError, match=r"not a model directory.*proj/models/agent"):
        load_history(tmp_path)  # the base path, not the model
    with pytest.raises(InvalidInputError, match=r"model directory path or an arthex\.Model"):
        load_history(42)  # type: ignore[arg-type]


def test_bad_filters_are_refused(run_dir: Path) -> None:
    with pytest.raises(InvalidInputError, match="steps"):
        load_trajectories(run_dir, steps="1")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="steps"):
        load_trajectories(run_dir, steps=[1, True])
    with pytest.raises(InvalidNameError):
        load_trajectories(run_dir, split="../val")


# --- history --------------------------------------------------------------------------------


def test_history_rows_come_back_typed_and_in_append_order(tmp_path: Path) -> None:
    report(
        tmp_path,
        MetricsRow(step=0, values={"train/reward": 0.5, "data/count": 4}, recorded_at=T0),
        MetricsRow(step=1, values={"loss/train": 0.25}, recorded_at=T0 + timedelta(seconds=1)),
        MetricsRow(step=0, values={"val/reward": 0.75}, recorded_at=T0 + timedelta(seconds=2)),
    )
    frame = load_history(model_path(tmp_path))
    assert frame.columns == [
        "step",
        "recorded_at",
        "train/reward",
        "data/count",
        "loss/train",
        "val/reward",
    ]
    assert frame.schema["step"] == pl.Int64
    assert frame.schema["recorded_at"] == pl.Datetime("us", "UTC")
    assert all(frame.schema[k] == pl.Float64 for k in frame.columns[2:])
    assert frame["step"].to_list() == [0, 1, 0]
    assert frame["recorded_at"].to_list() == [T0 + timedelta(seconds=i) for i in range(3)]
    assert frame["train/reward"].to_list() == [0.5, None, None]
    assert frame["data/count"].to_list() == [4.0, None, None]
    assert frame["val/reward"].to_list() == [None, None, 0.75]


def test_a_metric_first_logged_late_in_a_long_history_is_kept(tmp_path: Path) -> None:
    rows = [MetricsRow(step=i, values={"train/reward": i / 10}, recorded_at=T0) for i in range(700)]
    rows.append(MetricsRow(step=700, values={"val/late": 1.5}, recorded_at=T0))
    path = model_path(tmp_path) / "history.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"".join(encode_row(row) for row in rows))  # one write: no fsync per row
    frame = load_history(model_path(tmp_path))
    assert frame.height == 701
    assert frame["val/late"].to_list()[-2:] == [None, 1.5]
    assert frame["val/late"].null_count() == 700


def test_history_reads_art_rows_and_survives_a_torn_tail(tmp_path: Path) -> None:
    path = model_path(tmp_path) / "history.jsonl"
    path.parent.mkdir(parents=True)
    lines = [
        '{"train/reward": 0, "train/reward_std_dev": 0, "step": 0, "training_step": 0, '
        '"recorded_at": "2024-05-01T12:00:00+00:00"}',
        '{"loss/train": Infinity, "loss/grad_norm": null, "step": 1, "training_step": 1, '
        '"recorded_at": "2024-05-01T12:00:01+00:00"}',
        '{"val/reward": 0.5, "step": 1, "tra',  # a writer died mid-line
    ]
    path.write_text("\n".join(lines))
    frame = load_history(model_path(tmp_path))
    assert frame["step"].to_list() == [0, 1]
    assert frame["train/reward"].to_list() == [0.0, None]
    assert frame.schema["train/reward"] == pl.Float64  # ART's integer 0 is a float here
    assert frame["loss/train"].to_list() == [None, None]
    assert "val/reward" not in frame.columns


def test_a_model_without_history_is_an_empty_frame(run_dir: Path) -> None:
    frame = load_history(run_dir)
    assert frame.height == 0
    assert frame.columns == ["step", "recorded_at"]


def test_a_corrupt_line_in_the_middle_is_refused(tmp_path: Path) -> None:
    path = model_path(tmp_path) / "history.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text('{"step": 0, "x": 1}\nnot json\n{"step": 1, "x": 2}\n')
    with pytest.raises(CorruptDataError, match="line 2"):
        load_history(model_path(tmp_path))
