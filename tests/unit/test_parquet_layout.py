"""The files ParquetTrajectoryStore writes: ART's v2 layout, part naming, fail-closed reading."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai.types.chat.chat_completion import Choice

from arthex.adapters.parquet.store import ParquetTrajectoryStore, read_part
from arthex.core.errors import CorruptDataError, InvalidInputError
from arthex.core.identity import ModelSpec, RunRef
from arthex.core.trajectories import (
    CapturedException,
    History,
    Message,
    MessageOrChoice,
    Trajectory,
    TrajectoryGroup,
)
from arthex.testing.builders import make_choice, make_group, rich_groups
from arthex.testing.contracts.trajectory_store import assert_groups_identical

RUN = RunRef("proj", "run-1")
VERSION_KEY = b"art.trajectory_parquet.version"


def write(store: ParquetTrajectoryStore, groups: list[TrajectoryGroup], step: int = 0) -> Path:
    return Path(asyncio.run(store.write(RUN, "train", step, groups)))


def read(store: ParquetTrajectoryStore, step: int = 0) -> list[TrajectoryGroup]:
    return asyncio.run(store.read(RUN, "train", step))


@pytest.fixture
def store(tmp_path: Path) -> ParquetTrajectoryStore:
    return ParquetTrajectoryStore(str(tmp_path))


@pytest.fixture
def rich_file(store: ParquetTrajectoryStore) -> Path:
    return write(store, rich_groups())


def listing(directory: Path) -> list[str]:
    return sorted(os.listdir(directory))


# --- layout -----------------------------------------------------------------------------------


def test_part_goes_where_art_puts_it(store: ParquetTrajectoryStore, tmp_path: Path) -> None:
    path = write(store, [make_group()], step=3)
    assert (
        path == tmp_path / "proj" / "models" / "run-1" / "trajectories" / "train" / "0003.parquet"
    )
    assert write(store, [make_group()], step=12345).name == "12345.parquet"


def test_columns_and_types(rich_file: Path) -> None:
    schema = pq.read_schema(rich_file)
    message = pa.struct(
        [
            ("role", pa.string()),
            ("content", pa.string()),
            ("tool_calls", pa.string()),
            ("tool_call_id", pa.string()),
            ("trainable", pa.bool_()),
        ]
    )
    expected = {
        "format_version": pa.int16(),
        "group_index": pa.int64(),
        "trajectory_index": pa.int64(),
        "group_json": pa.large_string(),
        "trajectory_json": pa.large_string(),
        "group_metadata": pa.string(),
        "group_metrics": pa.string(),
        "group_logs": pa.list_(pa.string()),
        "reward": pa.float64(),
        "metrics": pa.string(),
        "metadata": pa.string(),
        "tools": pa.string(),
        "logs": pa.list_(pa.string()),
        "messages": pa.list_(message),
    }
    assert {field.name: field.type for field in schema} == expected


def test_version_metadata_and_zstd(rich_file: Path) -> None:
    file = pq.ParquetFile(rich_file)
    assert file.schema_arrow.metadata[VERSION_KEY] == b"2"
    meta = file.metadata
    compressions = {
        meta.row_group(r).column(c).compression
        for r in range(meta.num_row_groups)
        for c in range(meta.num_columns)
    }
    assert compressions == {"ZSTD"}
    assert set(pq.read_table(rich_file).column("format_version").to_pylist()) == {2}


def test_one_row_per_trajectory_and_a_sentinel_row_per_empty_group(rich_file: Path) -> None:
    rows = pq.read_table(rich_file).to_pylist()
    assert [(r["group_index"], r["trajectory_index"]) for r in rows] == [
        (0, 0), (0, 1), (1, None), (2, None), (3, 0), (4, 0), (4, 1),
    ]  # fmt: skip
    failed = rows[2]
    for column in ("trajectory_json", "reward", "metrics", "metadata", "tools", "logs", "messages"):
        assert failed[column] is None, column
    assert json.loads(failed["group_json"])["exceptions"][0]["type"] == "ValueError"
    assert json.loads(failed["group_metadata"]) == {"scenario_id": "s-2"}
    assert failed["group_logs"] == ["every rollout failed"]
    assert rows[3]["group_json"] == "{}"  # an empty group: every field at its default


def test_json_columns_are_authoritative_dumps(rich_file: Path) -> None:
    rows = pq.read_table(rich_file).to_pylist()
    assert rows[0]["group_json"] == rows[1]["group_json"]
    group = json.loads(rows[0]["group_json"])
    assert "trajectories" not in group
    assert group["metrics"] == {"solved": True, "attempts": 2, "mean_len": 12.5}
    assert [e["type"] for e in group["exceptions"]] == ["TimeoutError"]
    rich = json.loads(rows[0]["trajectory_json"])
    call = rich["messages_and_choices"][2]
    assert call["token_ids"] == [101, 102, 103]
    assert call["prompt_token_ids"] == [1, 2, 3, 4]
    assert {"finish_reason", "index", "logprobs", "message"} <= set(call)
    assert "refusal" in call["message"]  # Choices are full dumps, defaults included
    assert call["message"]["reasoning_content"].startswith("The user wants")
    minimal = json.loads(rows[4]["trajectory_json"])
    assert minimal == {"messages_and_choices": [], "reward": 0.0}  # trajectory defaults omitted
    assert "\\u" not in rows[0]["trajectory_json"]  # compact UTF-8, not ASCII escapes


def test_analytics_columns(rich_file: Path) -> None:
    rows = pq.read_table(rich_file).to_pylist()
    assert [r["reward"] for r in rows] == [0.75, -1.0, None, None, 0.0, 1.0, 0.0]
    metrics = json.loads(rows[0]["metrics"])
    assert metrics == {"correct": True, "turns": 3, "latency_s": 1.25, "zero": 0.0, "flag": False}
    assert type(metrics["correct"]) is bool
    assert json.loads(rows[0]["metadata"])["note"] is None
    assert json.loads(rows[0]["tools"])[0]["function"]["name"] == "get_weather"
    assert rows[0]["logs"][0] == "called get_weather"
    assert json.loads(rows[0]["group_metrics"]) == {"solved": True, "attempts": 2, "mean_len": 12.5}
    assert rows[0]["group_logs"] == ["group log", "ünïcödé"]
    minimal = rows[4]
    for column in ("metrics", "metadata", "tools", "logs", "group_metadata", "group_metrics"):
        assert minimal[column] is None, column
    assert minimal["group_logs"] is None
    assert minimal["messages"] == []
    assert rows[6]["tools"] is None  # an empty tool list is empty: null, as ART writes it


def test_messages_column_rules(rich_file: Path) -> None:
    rows = pq.read_table(rich_file).to_pylist()
    messages = rows[0]["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert [m["trainable"] for m in messages] == [False, False, True, False, True]
    call = messages[2]
    assert call["content"] is None  # a tool-call-only turn keeps the view, with a null content
    assert call["tool_call_id"] is None
    assert json.loads(call["tool_calls"])[0]["function"]["name"] == "get_weather"
    assert messages[3]["tool_call_id"] == "call_0"
    assert messages[3]["content"] == '{"temp": 21.5}'
    assert messages[4]["tool_calls"] is None
    assert rows[5]["messages"] is None  # multimodal content: the whole cell is null
    context = rows[6]["messages"]
    assert [m["trainable"] for m in context] == [False, False, False, True]
    assert json.loads(context[1]["tool_calls"])[0]["id"] == "ctx_1"
    assert context[2]["tool_call_id"] == "ctx_1"


# --- parts and files --------------------------------------------------------------------------


def test_further_writes_go_into_the_step_file_after_the_earlier_groups(
    store: ParquetTrajectoryStore,
) -> None:
    paths = [
        write(store, [make_group(metadata={"n": n}), make_group(metadata={"n": -n})], step=3)
        for n in range(3)
    ]
    assert [p.name for p in paths] == ["0003.parquet"] * 3
    assert store.part_paths(RUN, "train", 3) == paths[:1]
    assert listing(paths[0].parent) == [".lock", "0003.parquet"]
    assert [g.metadata["n"] for g in read(store, 3)] == [0, 0, 1, -1, 2, -2]
    # the file alone, read by pyarrow: group indexes run on across the writes
    table = pq.read_table(paths[0])
    assert table.column("group_index").to_pylist() == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    assert pq.read_schema(paths[0]).metadata[VERSION_KEY] == b"2"


def test_parts_keep_order_past_ten(store: ParquetTrajectoryStore) -> None:
    for n in range(12):
        write(store, [make_group([1.0], metadata={"n": n})])
    assert [g.metadata["n"] for g in read(store)] == list(range(12))


def test_temp_and_unrelated_files_are_ignored(store: ParquetTrajectoryStore) -> None:
    directory = write(store, [make_group()], step=1).parent
    (directory / ".tmp-0005.parquet.123.abcd").write_bytes(b"half a file")
    (directory / "notes.txt").write_text("hello")
    (directory / "0007.parquet.bak").write_bytes(b"x")
    (directory / "12.parquet").write_bytes(b"x")  # not a name this store writes
    (directory / "0008-0.parquet").write_bytes(b"x")
    (directory / "0009.parquet").mkdir()
    assert asyncio.run(store.steps(RUN, "train")) == [1]
    assert read(store, 5) == []
    assert len(read(store, 1)) == 1


def test_failed_write_leaves_existing_part_untouched(store: ParquetTrajectoryStore) -> None:
    path = write(store, [make_group([0.0, 1.0])])
    before = path.read_bytes()
    names = listing(path.parent)
    broken = make_group([1.0])
    broken.trajectories[0].metrics["bad"] = ["not", "a", "scalar"]  # type: ignore[assignment]
    with pytest.raises(InvalidInputError, match=r"groups\[1\]\.trajectories\[0\]"):
        write(store, [make_group(), broken])
    assert path.read_bytes() == before
    assert listing(path.parent) == names


@pytest.mark.parametrize("split", ["..", "../../outside", "a/b", ""])
def test_bad_split_creates_nothing_on_disk(
    store: ParquetTrajectoryStore, tmp_path: Path, split: str
) -> None:
    with pytest.raises(InvalidInputError):
        asyncio.run(store.write(RUN, split, 0, [make_group()]))
    with pytest.raises(InvalidInputError):
        asyncio.run(store.write(RUN, "train", -1, [make_group()]))
    assert list(tmp_path.rglob("*")) == []
    assert list(tmp_path.parent.glob("outside")) == []


@pytest.mark.faults
def test_crash_while_writing_leaves_no_part(
    store: ParquetTrajectoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(store, [make_group()])
    before = path.read_bytes()

    def crash(table: pa.Table, where: Path, **kwargs: Any) -> None:
        Path(where).write_bytes(b"PAR1 partial")
        raise OSError("disk full")

    monkeypatch.setattr(pq, "write_table", crash)
    with pytest.raises(OSError, match="disk full"):
        write(store, [make_group()])
    monkeypatch.undo()
    assert listing(path.parent) == [".lock", "0000.parquet"]
    assert path.read_bytes() == before
    write(store, [make_group()])
    assert listing(path.parent) == [".lock", "0000.parquet"]
    assert len(read(store)) == 2


@pytest.mark.faults
@pytest.mark.slow
def test_two_processes_writing_one_step_both_keep_their_data(tmp_path: Path) -> None:
    go = tmp_path / "go"
    worker = textwrap.dedent(
        f"""
        import asyncio, os, sys, time
        from arthex.adapters.parquet.store import ParquetTrajectoryStore
        from arthex.core.identity import RunRef
        from arthex.testing.builders import make_group
        store = ParquetTrajectoryStore({str(tmp_path / "art")!r})
        who = sys.argv[1]
        open(os.path.join({str(tmp_path)!r}, "ready-" + who), "w").close()
        while not os.path.exists({str(go)!r}):
            time.sleep(0.005)
        for n in range(5):
            asyncio.run(store.write(RunRef("proj", "run-1"), "train", 0,
                                    [make_group(metadata={{"who": who, "n": n}})]))
        """
    )
    workers = [subprocess.Popen([sys.executable, "-c", worker, who]) for who in ("a", "b")]
    # a barrier: both writers are up (imports done) before either writes, however slow
    while not all((tmp_path / f"ready-{who}").exists() for who in ("a", "b")):
        assert all(w.poll() is None for w in workers), "a writer died while starting"
        time.sleep(0.005)
    go.touch()
    assert [w.wait(timeout=120) for w in workers] == [0, 0]
    store = ParquetTrajectoryStore(str(tmp_path / "art"))
    back = [(g.metadata["who"], g.metadata["n"]) for g in read(store)]
    assert sorted(back) == sorted((who, n) for who in ("a", "b") for n in range(5))
    for who in ("a", "b"):  # each writer's groups are in its own write order
        assert [n for w, n in back if w == who] == list(range(5))
    assert [p.name for p in store.part_paths(RUN, "train", 0)] == ["0000.parquet"]


def test_model_json(store: ParquetTrajectoryStore, tmp_path: Path) -> None:
    spec = ModelSpec(RUN, base_model="Qwen/Qwen2.5-0.5B-Instruct", config={"lr": 1e-5, "ü": [1]})
    asyncio.run(store.write_model_spec(spec))
    path = tmp_path / "proj" / "models" / "run-1" / "model.json"
    assert json.loads(path.read_text("utf-8")) == spec.to_json()
    replaced = ModelSpec(RUN, base_model=None, trainable=False)
    asyncio.run(store.write_model_spec(replaced))
    assert json.loads(path.read_text("utf-8")) == replaced.to_json()
    assert listing(path.parent) == ["model.json"]


def test_model_json_with_non_finite_config_is_refused(
    store: ParquetTrajectoryStore, tmp_path: Path
) -> None:
    with pytest.raises(InvalidInputError, match="config"):
        asyncio.run(store.write_model_spec(ModelSpec(RUN, config={"lr": float("nan")})))
    assert not (tmp_path / "proj").exists()


# --- fail-closed reading ----------------------------------------------------------------------

Edit = Callable[[pa.Table], pa.Table]


def _set(column: str, values: list[Any]) -> Edit:
    def edit(table: pa.Table) -> pa.Table:
        index = table.schema.get_field_index(column)
        return table.set_column(
            index, table.schema.field(index), pa.array(values, table[column].type)
        )

    return edit


def _metadata(metadata: dict[bytes, bytes] | None) -> Edit:
    return lambda table: table.replace_schema_metadata(metadata)


def _edit_json(row: int, column: str, change: Callable[[dict[str, Any]], Any]) -> Edit:
    def edit(table: pa.Table) -> pa.Table:
        values = table[column].to_pylist()
        values[row] = json.dumps(change(json.loads(values[row])))
        return _set(column, values)(table)

    return edit


def _sentinel_beside_data(table: pa.Table) -> pa.Table:
    """Row 1 of group 0 becomes a sentinel row while row 0 stays a data row."""
    dumps = table["trajectory_json"].to_pylist()
    table = _set("trajectory_index", [0, None, None, 0, 1])(table)
    return _set("trajectory_json", [dumps[0], None, *dumps[2:]])(table)


def _trajectories_in_group_json(table: pa.Table) -> pa.Table:
    dumps = table["group_json"].to_pylist()
    return _set("group_json", ['{"trajectories":[]}'] * 2 + dumps[2:])(table)


CORRUPTIONS: dict[str, tuple[Edit, str]] = {
    "unknown version": (_metadata({VERSION_KEY: b"3"}), "version '3'"),
    "no version metadata": (_metadata(None), "no 'art.trajectory_parquet.version'"),
    "row version": (_set("format_version", [2, 1, 2, 2, 2]), "format_version 1"),
    "group gap": (_set("group_index", [0, 0, 2, 3, 3]), "not contiguous"),
    "trajectory gap": (_set("trajectory_index", [0, 2, None, 0, 1]), "trajectory indexes"),
    "duplicate trajectory": (_set("trajectory_index", [0, 0, None, 0, 1]), "trajectory indexes"),
    "sentinel mixed with data": (_sentinel_beside_data, "mixes a sentinel"),
    "half a sentinel": (_set("trajectory_index", [0, None, None, 0, 1]), "both trajectory_index"),
    "group_json differs": (
        _edit_json(1, "group_json", lambda g: {**g, "logs": ["x"]}),
        "differing",
    ),
    "group_json with trajectories": (_trajectories_in_group_json, "must not hold trajectories"),
    "malformed json": (_set("trajectory_json", ["{", "{}", None, "{}", "{}"]), "malformed"),
    "json not an object": (
        _set("trajectory_json", ["[]", "{}", None, "{}", "{}"]),
        "not an object",
    ),
    "invalid trajectory": (
        _edit_json(0, "trajectory_json", lambda t: {**t, "reward": "high"}),
        "not a valid trajectory group",
    ),
    "exchanges of an unknown kind": (
        _edit_json(0, "trajectory_json", lambda t: {**t, "exchanges": {"x": [1]}}),
        "exchanges",
    ),
    "missing column": (lambda t: t.drop_columns(["trajectory_json"]), "lacks the column"),
}


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_reading_fails_closed(store: ParquetTrajectoryStore, name: str) -> None:
    groups = [make_group([0.0, 1.0]), TrajectoryGroup(exceptions=[ValueError("x")]),
              make_group([1.0, 0.5])]  # fmt: skip
    path = write(store, groups)
    edit, message = CORRUPTIONS[name]
    table = pq.read_table(path)
    pq.write_table(edit(table), path, compression="zstd")
    with pytest.raises(CorruptDataError, match=message) as caught:
        read(store)
    assert str(path) in str(caught.value)


def test_garbage_file_fails_closed(store: ParquetTrajectoryStore) -> None:
    path = write(store, [make_group()])
    path.write_bytes(b"definitely not parquet")
    with pytest.raises(CorruptDataError, match="cannot be read as parquet") as caught:
        read(store)
    assert str(path) in str(caught.value)


def test_reads_a_file_written_the_art_way(tmp_path: Path) -> None:
    """ART writes `<class 'X'>` exception types and fields arthex does not model; only the
    authoritative columns are needed to read."""
    choice = make_choice("hi", prompt_token_ids=[1, 2]).model_dump(mode="json")
    trajectory = {
        "messages_and_choices": [{"role": "user", "content": "yo"}, choice],
        "reward": 1.0,
        "initial_policy_version": 3,
        "exchanges": {},
    }
    group = {"exceptions": [{"type": "<class 'ValueError'>", "message": "bad", "traceback": "tb"}]}
    table = pa.table(
        {
            "format_version": pa.array([2], pa.int16()),
            "group_index": pa.array([0], pa.int64()),
            "trajectory_index": pa.array([0], pa.int64()),
            "group_json": pa.array([json.dumps(group)], pa.large_string()),
            "trajectory_json": pa.array([json.dumps(trajectory)], pa.large_string()),
        }
    ).replace_schema_metadata({VERSION_KEY: b"2"})
    path = tmp_path / "0000.parquet"
    pq.write_table(table, path, compression="zstd")
    (back,) = read_part(path)
    assert back.exceptions == [CapturedException(type="ValueError", message="bad", traceback="tb")]
    (only,) = back.trajectories
    assert isinstance(only.messages_and_choices[1], Choice)
    assert only.messages_and_choices[1].model_extra == {"token_ids": [104, 105],
                                                        "prompt_token_ids": [1, 2]}  # fmt: skip


# --- properties -------------------------------------------------------------------------------

texts = st.text(max_size=40)
long_texts = st.builds(lambda chunk, times: chunk * times, st.text(min_size=1, max_size=8),
                       st.integers(200, 1500))  # fmt: skip
any_text = st.one_of(texts, texts, long_texts)
finite = st.floats(allow_nan=False, allow_infinity=False)
metric_values = st.one_of(st.booleans(), st.integers(), st.floats(allow_nan=False))
metadata_values = st.one_of(st.none(), st.booleans(), st.integers(), finite, texts)
keys = st.text(min_size=1, max_size=12)
tool_calls = st.lists(
    st.fixed_dictionaries({"name": st.text(min_size=1, max_size=16), "arguments": any_text}),
    max_size=2,
)
tools = st.one_of(
    st.none(),
    st.lists(st.fixed_dictionaries({"type": st.just("function"),
                                    "function": st.fixed_dictionaries({"name": keys})}),
             max_size=2),
)  # fmt: skip


@st.composite
def choices(draw: st.DrawFn) -> Choice:
    tokens = draw(st.lists(st.integers(0, 2**31 - 1), max_size=12))
    logprobs = draw(
        st.one_of(st.none(), st.lists(st.floats(max_value=0.0, allow_nan=False),
                                      min_size=len(tokens), max_size=len(tokens)))
    )  # fmt: skip
    return make_choice(
        draw(st.one_of(st.none(), any_text)),
        tool_calls=draw(tool_calls),
        token_ids=tokens,
        prompt_token_ids=draw(st.lists(st.integers(0, 2**31 - 1), max_size=12)),
        logprobs=logprobs,
        finish_reason=draw(st.sampled_from(["stop", "length", "tool_calls"])),
    )


def _message(role: str, content: Any, call_id: str | None) -> Message:
    message: Message = {"role": role, "content": content}
    if call_id is not None:
        message["tool_call_id"] = call_id
    return message


multimodal = st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": texts}), max_size=2)
messages = st.builds(
    _message,
    st.sampled_from(["system", "user", "assistant", "tool"]),
    st.one_of(any_text, any_text, st.none(), multimodal),
    st.one_of(st.none(), texts),
)
conversation: st.SearchStrategy[list[MessageOrChoice]] = st.lists(
    st.one_of(messages, choices()), max_size=5
)
histories = st.builds(History, messages_and_choices=conversation, tools=tools)
trajectories = st.builds(
    Trajectory,
    messages_and_choices=conversation,
    tools=tools,
    additional_histories=st.lists(histories, max_size=2),
    reward=finite,
    metrics=st.dictionaries(keys, metric_values, max_size=4),
    metadata=st.dictionaries(keys, metadata_values, max_size=4),
    logs=st.lists(any_text, max_size=2),
)
exceptions = st.builds(CapturedException, type=st.text(min_size=1, max_size=20), message=texts,
                       traceback=texts)  # fmt: skip
groups = st.builds(
    lambda trajectories, exceptions, metadata, metrics, logs: TrajectoryGroup(
        trajectories, exceptions=exceptions, metadata=metadata, metrics=metrics, logs=logs
    ),
    st.lists(trajectories, max_size=3),
    st.lists(exceptions, max_size=2),
    st.dictionaries(keys, metadata_values, max_size=3),
    st.dictionaries(keys, metric_values, max_size=3),
    st.lists(texts, max_size=2),
)
PROPERTY = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def shared_store(tmp_path_factory: pytest.TempPathFactory) -> ParquetTrajectoryStore:
    """One store for every example: each example takes a fresh step, so directories (and their
    fsyncs) are made once rather than per example."""
    return ParquetTrajectoryStore(str(tmp_path_factory.mktemp("property")))


fresh_steps = itertools.count()


@PROPERTY
@given(batch=st.lists(groups, max_size=3))
def test_round_trip_is_lossless(
    shared_store: ParquetTrajectoryStore, batch: list[TrajectoryGroup]
) -> None:
    step = next(fresh_steps)
    write(shared_store, batch, step)
    write(shared_store, batch[:1], step)
    assert_groups_identical(batch + batch[:1], read(shared_store, step))


@PROPERTY
@given(trajectory=trajectories)
def test_messages_view_follows_the_conversation(
    shared_store: ParquetTrajectoryStore, trajectory: Trajectory
) -> None:
    path = write(shared_store, [TrajectoryGroup([trajectory])], next(fresh_steps))
    (view,) = pq.read_table(path).column("messages").to_pylist()
    items = trajectory.messages_and_choices
    if any(
        isinstance(item, dict) and not isinstance(item.get("content"), str | None) for item in items
    ):
        assert view is None
        return
    assert view is not None
    assert [m["trainable"] for m in view] == [isinstance(item, Choice) for item in items]
    for entry, item in zip(view, items):
        if isinstance(item, Choice):
            assert entry["content"] == item.message.content
            calls = [call.model_dump(mode="json") for call in item.message.tool_calls or []]
            if calls:
                assert json.loads(entry["tool_calls"]) == calls
            else:
                assert entry["tool_calls"] is None
        else:
            assert (entry["role"], entry["content"]) == (item["role"], item["content"])
            assert entry["tool_call_id"] == item.get("tool_call_id")
