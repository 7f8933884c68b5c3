"""arthex.art's own frontend utilities, in arthex's venv: ART's trajectory file functions
(written with the store's encoder, read with its decoder), `strip_logprobs`,
`yield_trajectory`. The same behaviours are compared with ART's own code in
tests/interop/test_art_frontend.py; here the oracles are the physical file and hand-worked
values."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from arthex.adapters.parquet.store import read_part
from arthex.art.trajectories import PydanticException
from arthex.art.utils.strip_logprobs import strip_logprobs
from arthex.art.utils.trajectory_logging import (
    read_trajectory_groups_parquet,
    write_trajectory_groups_parquet,
)
from arthex.art.yield_trajectory import capture_yielded_trajectory, yield_trajectory
from arthex.core.errors import CorruptDataError, InvalidInputError
from arthex.core.trajectories import CapturedException, Trajectory, TrajectoryGroup
from arthex.testing.builders import make_choice, rich_groups


def test_a_written_file_is_the_stores_v2_part_and_reads_back_whole(tmp_path: Path) -> None:
    groups = [
        *rich_groups(),
        TrajectoryGroup(exceptions=[CapturedException(type="E", message="m")]),
    ]
    path = tmp_path / "groups.parquet"
    write_trajectory_groups_parquet(groups, path)
    file = pq.ParquetFile(path)
    assert file.schema_arrow.metadata[b"art.trajectory_parquet.version"] == b"2"
    assert file.metadata.row_group(0).column(0).compression == "ZSTD"
    assert read_part(path) == groups  # the store reads it as one of its own parts
    back = read_trajectory_groups_parquet(str(path))
    assert [g.model_dump(mode="json") for g in back] == [g.model_dump(mode="json") for g in groups]
    assert back[-1].trajectories == [] and back[-1].exceptions[0].type == "E"
    write_trajectory_groups_parquet([], path)  # replaced, and an empty file reads as no groups
    assert read_trajectory_groups_parquet(path) == []
    assert [p.name for p in tmp_path.iterdir()] == ["groups.parquet"]  # no temp file left


def test_a_batch_that_cannot_be_stored_leaves_the_file_untouched(tmp_path: Path) -> None:
    path = tmp_path / "groups.parquet"
    write_trajectory_groups_parquet(rich_groups(), path)
    before = path.read_bytes()
    bad = Trajectory(metadata={"k": "v"})
    bad.metadata["k"] = object()  # type: ignore[assignment]
    with pytest.raises(InvalidInputError, match=r"groups\[0\]\.trajectories\[0\]") as caught:
        write_trajectory_groups_parquet([TrajectoryGroup(trajectories=[bad])], path)
    assert isinstance(caught.value, ValueError)  # what ART's callers catch
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["groups.parquet"]


def test_an_art_v1_file_reads_as_plain_messages(tmp_path: Path) -> None:
    message = pa.struct(
        [
            ("role", pa.string()),
            ("content", pa.string()),
            ("tool_calls", pa.string()),
            ("tool_call_id", pa.string()),
            ("trainable", pa.bool_()),
        ]
    )
    table = pa.table(
        {
            "group_index": pa.array([1, 1, 0], pa.int64()),
            "group_metrics": pa.array(['{"g": 1}', '{"g": 9}', None]),
            "reward": pa.array([0.5, 1.5, None]),
            "metadata": pa.array(["[1]", None, None]),
            "logs": pa.array([["l"], None, None], pa.list_(pa.string())),
            "messages": pa.array(
                [
                    [
                        {
                            "role": "assistant",
                            "content": "a",
                            "tool_calls": None,
                            "tool_call_id": None,
                            "trainable": True,
                        }
                    ],
                    [],
                    None,
                ],
                pa.list_(message),
            ),
        }
    )
    pq.write_table(table, tmp_path / "v1.parquet")
    [group] = read_trajectory_groups_parquet(tmp_path / "v1.parquet")  # group 0: a placeholder
    assert group.metrics == {"g": 1}  # the group's first row
    assert [t.reward for t in group.trajectories] == [0.5, 1.5]
    first = group.trajectories[0]
    assert first.messages_and_choices == [{"role": "assistant", "content": "a"}]
    assert first.metadata == {} and first.logs == ["l"]  # a non-object metadata cell is empty


def test_files_that_are_not_trajectory_files_are_value_errors_naming_them(tmp_path: Path) -> None:
    good = tmp_path / "good.parquet"
    write_trajectory_groups_parquet(rich_groups(), good)
    table = pq.read_table(good)
    cases = {
        "v3.parquet": table.replace_schema_metadata({b"art.trajectory_parquet.version": b"3"}),
        "unmarked.parquet": table.drop_columns(["format_version"]),
    }
    for name, bad in cases.items():
        pq.write_table(bad, tmp_path / name)
    (tmp_path / "text.parquet").write_text("no")
    for name in [*cases, "text.parquet"]:
        with pytest.raises(ValueError, match=name) as caught:
            read_trajectory_groups_parquet(tmp_path / name)
        assert isinstance(caught.value, CorruptDataError)
    with pytest.raises(FileNotFoundError):
        read_trajectory_groups_parquet(tmp_path / "missing.parquet")
    unlabelled = tmp_path / "unlabelled.parquet"  # v2 rows whose footer lost its version
    pq.write_table(table.replace_schema_metadata({}), unlabelled)
    assert read_trajectory_groups_parquet(unlabelled) == read_part(good)


def test_pydantic_exception_is_the_groups_recorded_exception() -> None:
    error = PydanticException(type="ValueError", message="m", traceback="tb")
    group = TrajectoryGroup(exceptions=[error])
    assert group.exceptions[0] is error and error.traceback == "tb"


def test_strip_logprobs_copies_without_any_logprobs() -> None:
    choice = make_choice("hi", logprobs=-0.25)
    value = {"logprobs": 1, "items": [choice, ({"logprobs": [2], "keep": 3},)]}
    stripped = strip_logprobs(value)
    assert stripped["items"][1] == ({"keep": 3},) and "logprobs" not in stripped
    assert stripped["items"][0].logprobs is None and stripped["items"][0].message.content == "hi"
    assert choice.logprobs is not None and value["logprobs"] == 1  # the original is untouched


def test_yielded_trajectories_stay_with_their_own_rollout() -> None:
    async def rollout(reward: float, delay: float) -> None:
        await asyncio.sleep(delay)
        yield_trajectory(Trajectory(reward=reward))

    async def main() -> list[float]:
        got = await asyncio.gather(
            capture_yielded_trajectory(rollout(1.0, 0.02)),
            capture_yielded_trajectory(rollout(2.0, 0.0)),
        )
        return [t.reward for t in got]

    assert asyncio.run(main()) == [1.0, 2.0]

    async def silent() -> None:
        return None

    with pytest.raises(RuntimeError, match="No trajectory yielded"):
        asyncio.run(capture_yielded_trajectory(silent()))


def test_round_trip_keeps_text_json_exactly(tmp_path: Path) -> None:
    group = TrajectoryGroup(
        trajectories=[
            Trajectory(
                messages_and_choices=[{"role": "user", "content": "naïve ✓"}, make_choice("ok")],
                reward=0.1,
            )
        ]
    )
    write_trajectory_groups_parquet([group], tmp_path / "g.parquet")
    cell = pq.read_table(tmp_path / "g.parquet").column("trajectory_json")[0].as_py()
    assert json.loads(cell)["messages_and_choices"][0]["content"] == "naïve ✓"


def test_a_litellm_choice_read_by_its_fields_becomes_an_openai_choice() -> None:
    from types import SimpleNamespace

    from arthex.art.utils.litellm import convert_litellm_choice_to_openai

    call = SimpleNamespace(
        id="c", type="function", function=SimpleNamespace(name="f", arguments="{}")
    )
    message = SimpleNamespace(role="assistant", content=None, tool_calls=[call])
    token = {"token": "a", "bytes": [97], "logprob": -0.5, "top_logprobs": []}
    choice = SimpleNamespace(
        message=message,
        finish_reason="tool_calls",
        index=2,
        logprobs=SimpleNamespace(content=[token]),
    )
    converted = convert_litellm_choice_to_openai(choice)
    assert converted.index == 2 and converted.finish_reason == "tool_calls"
    assert converted.message.tool_calls is not None
    assert converted.message.tool_calls[0].id == "c"
    assert converted.logprobs is not None and converted.logprobs.content is not None
    assert converted.logprobs.content[0].logprob == -0.5
    with pytest.raises(InvalidInputError, match="non-streaming"):
        convert_litellm_choice_to_openai(SimpleNamespace(delta={}, finish_reason=None, index=0))
