"""Captured trajectories in trajectory parquet: ART's `exchanges` representation, both ways."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from arthex.adapters.parquet.schema import VERSION_KEY
from arthex.adapters.parquet.store import ParquetTrajectoryStore, read_part
from arthex.core.capture import token_samples
from arthex.core.errors import InvalidInputError
from arthex.core.identity import RunRef
from arthex.core.trajectories import CapturedException, Trajectory, TrajectoryGroup
from tests._chat_script import ChatScript
from tests.unit.test_capture_samples import captured, weather_reply

RUN = RunRef("proj", "run-1")

# One trajectory as openpipe-art 0.5.23's parquet writer writes it (`trajectory_json` cell,
# produced by its own code): the oracle for reading ART's captured runs.
ART_TRAJECTORY_JSON = (
    '{"exchanges":{"chat_completions":[{"start_time":"2025-01-01T00:00:00Z","end_time":'
    '"2025-01-01T00:00:01Z","request":{"model":"m@0","messages":[{"role":"user","content":"x"}],'
    '"logprobs":true},"response":{"id":"c1","choices":[{"finish_reason":"stop","index":0,'
    '"logprobs":{"content":[{"token":"hi","bytes":[104,105],"logprob":-0.5,"top_logprobs":[]}],'
    '"refusal":null},"message":{"content":"hi","refusal":null,"role":"assistant","annotations":'
    'null,"audio":null,"function_call":null,"tool_calls":null},"token_ids":[5]}],"created":1,'
    '"model":"m@0","object":"chat.completion","moderation":null,"service_tier":null,'
    '"system_fingerprint":null,"usage":{"completion_tokens":1,"prompt_tokens":3,"total_tokens":4,'
    '"completion_tokens_details":null,"prompt_tokens_details":null},"prompt_token_ids":[1,2,3]}}'
    ']},"reward":1.0,"initial_policy_version":2}'
)


def roundtrip(tmp_path: Path, groups: list[TrajectoryGroup]) -> tuple[Path, list[TrajectoryGroup]]:
    store = ParquetTrajectoryStore(str(tmp_path / "art"))
    path = Path(asyncio.run(store.write(RUN, "train", 0, groups)))
    return path, asyncio.run(store.read(RUN, "train", 0))


def test_a_captured_group_round_trips_losslessly_with_its_crashed_rollout(tmp_path: Path) -> None:
    done = captured(ChatScript(weather_reply))
    done.metrics["custom"] = 1
    done.metadata["scenario"] = "paris"
    crashed = captured(ChatScript(weather_reply), rewrite=True)
    crashed.metadata["capture_incomplete"] = True
    partial = captured(ChatScript(weather_reply))
    error = CapturedException.from_exception(RuntimeError("boom"), trajectory=partial)
    group = TrajectoryGroup([done, crashed], exceptions=[error], metadata={"g": 1})

    path, (back,) = roundtrip(tmp_path, [group])
    assert back.model_dump(mode="json") == group.model_dump(mode="json")
    assert token_samples(back.trajectories[1], "t") == token_samples(crashed, "t")
    assert back.trajectories[1].incomplete
    assert back.exceptions[0].trajectory is not None
    assert back.exceptions[0].trajectory.exchanges == partial.exchanges

    table = pq.read_table(path)
    cell = json.loads(table.column("trajectory_json")[0].as_py())
    assert list(cell) == ["exchanges", "reward", "metrics", "metadata"]
    assert list(cell["exchanges"]) == ["chat_completions"]
    first = cell["exchanges"]["chat_completions"][0]
    assert list(first) == ["start_time", "end_time", "request", "response"]
    assert first["start_time"].endswith("Z")
    assert table.column("messages").to_pylist() == [None, None]  # ART leaves it null
    assert table.column("tools").to_pylist() == [None, None]


def test_non_finite_logprobs_survive(tmp_path: Path) -> None:
    trajectory = captured(ChatScript(weather_reply))
    data = json.loads(trajectory.model_dump_json())
    data["exchanges"]["chat_completions"][0]["response"]["choices"][0]["logprobs"]["content"][0][
        "logprob"
    ] = float("-inf")
    odd = Trajectory.model_validate(data)
    _, (back,) = roundtrip(tmp_path, [TrajectoryGroup([odd])])
    (exchange, *_) = back.trajectories[0].exchanges.chat_completions
    logprobs = exchange.response.choices[0].logprobs
    assert logprobs is not None and logprobs.content is not None
    assert logprobs.content[0].logprob == -math.inf


def test_an_art_captured_run_reads_and_trains(tmp_path: Path) -> None:
    table = pa.table(
        {
            "format_version": pa.array([2], pa.int16()),
            "group_index": pa.array([0], pa.int64()),
            "trajectory_index": pa.array([0], pa.int64()),
            "group_json": pa.array(["{}"], pa.large_string()),
            "trajectory_json": pa.array([ART_TRAJECTORY_JSON], pa.large_string()),
        }
    ).replace_schema_metadata({VERSION_KEY: b"2"})
    path = tmp_path / "0000.parquet"
    pq.write_table(table, path, compression="zstd")
    (group,) = read_part(path)
    (trajectory,) = group.trajectories
    (exchange,) = trajectory.exchanges.chat_completions
    assert exchange.request["messages"] == [{"role": "user", "content": "x"}]
    assert (
        exchange.model == "m@0" and exchange.start_time.isoformat() == "2025-01-01T00:00:00+00:00"
    )
    assert trajectory.reward == 1.0
    (sample,) = token_samples(trajectory, "t")
    assert sample.tokens == (1, 2, 3, 5) and sample.trained == (False, False, False, True)
    assert sample.logprobs[-1] == -0.5


def test_a_trajectory_mixing_exchanges_and_messages_is_refused_before_writing(
    tmp_path: Path,
) -> None:
    group = TrajectoryGroup([captured(ChatScript(weather_reply))])
    group.trajectories[0].messages_and_choices.append({"role": "user", "content": "sneaked in"})
    store = ParquetTrajectoryStore(str(tmp_path / "art"))
    with pytest.raises(InvalidInputError, match="both captured exchanges"):
        asyncio.run(store.write(RUN, "train", 0, [group]))
    assert not list((tmp_path / "art").rglob("*.parquet"))
