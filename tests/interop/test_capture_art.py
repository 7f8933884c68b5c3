"""Captured runs across the two projects: ART's own reader reads what arthex captured, and
arthex reads (and trains from) what ART captured.

ART's code runs in its own Python >= 3.12 venv (the interop suite's `art_interpreter`
fixture builds it, or fails saying what to install), in a subprocess.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest

from arthex.adapters.parquet.store import ParquetTrajectoryStore, read_part
from arthex.core.capture import token_samples
from arthex.core.identity import RunRef
from arthex.core.trajectories import CapturedException, TrajectoryGroup
from tests._chat_script import ChatScript
from tests.unit.test_capture_samples import captured, weather_reply

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def run_art(python: Path, script: str, *args: str) -> Any:
    done = subprocess.run(
        [str(python), "-c", textwrap.dedent(script), *args],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


READ_WITH_ART = """
    import json, sys
    from art.utils.trajectory_logging import read_trajectory_groups_parquet
    def call(e):
        choices = e.response.choices
        return {
            "request": e.request,
            "model": e.model,
            "prompt_token_ids": (e.response.model_extra or {}).get("prompt_token_ids"),
            "token_ids": [(c.model_extra or {}).get("token_ids") for c in choices],
            "logprobs": [[x.logprob for x in c.logprobs.content] for c in choices],
            "tool_calls": [[tc.function.name for tc in c.message.tool_calls or []]
                           for c in choices],
            "start_time": e.start_time.isoformat(),
        }

    groups = read_trajectory_groups_parquet(sys.argv[1])
    out = []
    for group in groups:
        out.append({
            "exceptions": [e.type for e in group.exceptions],
            "metadata": group.metadata,
            "trajectories": [
                {
                    "reward": t.reward,
                    "metadata": t.metadata,
                    "messages_and_choices": len(t.messages_and_choices),
                    "calls": [call(e) for e in t.exchanges.chat_completions],
                }
                for t in group.trajectories
            ],
        })
    print(json.dumps(out))
"""


def write(root: Path, group: TrajectoryGroup) -> Path:
    store = ParquetTrajectoryStore(str(root))
    return Path(asyncio.run(store.write(RunRef("interop", "captured"), "train", 0, [group])))


def test_art_reads_a_run_arthex_captured(tmp_path: Path, art_interpreter: Path) -> None:
    done = captured(ChatScript(weather_reply))
    done.metadata["scenario"] = "weather"
    rewritten = captured(ChatScript(weather_reply), rewrite=True)
    rewritten.reward = 0.25
    crashed = CapturedException.from_exception(
        RuntimeError("agent crashed"), trajectory=captured(ChatScript(weather_reply))
    )
    group = TrajectoryGroup([done, rewritten], exceptions=[crashed], metadata={"g": "1"})
    path = write(tmp_path / "art", group)

    (art_group,) = run_art(art_interpreter, READ_WITH_ART, str(path))
    assert art_group["exceptions"] and art_group["metadata"] == {"g": "1"}
    for ours, theirs in zip(group.trajectories, art_group["trajectories"], strict=True):
        assert theirs["reward"] == ours.reward and theirs["metadata"] == ours.metadata
        assert theirs["messages_and_choices"] == 0
        calls = ours.exchanges.chat_completions
        assert len(theirs["calls"]) == len(calls)
        for exchange, call in zip(calls, theirs["calls"]):
            response = exchange.response
            assert call["request"] == exchange.request and call["model"] == exchange.model
            assert call["prompt_token_ids"] == (response.model_extra or {})["prompt_token_ids"]
            assert call["token_ids"] == [
                (c.model_extra or {})["token_ids"] for c in response.choices
            ]
            assert call["logprobs"] == [
                [x.logprob for x in (c.logprobs.content or [])]
                for c in response.choices
                if c.logprobs
            ]
            assert call["start_time"] == exchange.start_time.isoformat()
        assert theirs["calls"][0]["tool_calls"] == [["get_weather"]]


WRITE_WITH_ART = """
    import json, sys, datetime
    from openai.types.chat import ChatCompletion
    from art.trajectories import Trajectory, TrajectoryGroup, ChatCompletionsExchange
    from art.utils.trajectory_logging import write_trajectory_groups_parquet

    def exchange(prompt, sampled, content, calls, second):
        message = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = calls
        response = ChatCompletion.model_validate({
            "id": f"c{second}", "object": "chat.completion", "created": 1, "model": "agent@3",
            "prompt_token_ids": prompt,
            "choices": [{"index": 0, "finish_reason": "tool_calls" if calls else "stop",
                         "message": message, "token_ids": sampled,
                         "logprobs": {"content": [
                             {"token": f"token_id:{t}", "logprob": -0.5 - i / 10,
                              "bytes": [], "top_logprobs": []}
                             for i, t in enumerate(sampled)]}}],
            "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(sampled),
                      "total_tokens": len(prompt) + len(sampled)}})
        at = datetime.datetime(2025, 6, 1, 12, 0, second, tzinfo=datetime.UTC)
        return ChatCompletionsExchange(
            request={"model": "agent@3", "messages": [{"role": "user", "content": "weather?"}],
                     "tools": [{"type": "function", "function": {"name": "get_weather"}}]},
            response=response, start_time=at, end_time=at + datetime.timedelta(seconds=1))

    call = [{"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}}]
    t = Trajectory(reward=0.75, metadata={"scenario": "paris"}, metrics={"turns": 2})
    calls = t.exchanges.chat_completions
    calls.append(exchange([1, 2, 3], [10, 11], None, call, 0))
    calls.append(exchange([1, 2, 3, 10, 11, 4, 5], [12, 13], "sunny", None, 2))
    other = Trajectory(reward=0.0)
    other.exchanges.chat_completions.append(exchange([1, 2, 3], [20], "no idea", None, 4))
    group = TrajectoryGroup([t, other], exceptions=[ValueError("a rollout failed")])
    write_trajectory_groups_parquet([group], sys.argv[1])
    print(json.dumps({"written": sys.argv[1]}))
"""


def test_arthex_reads_and_trains_a_run_art_captured(tmp_path: Path, art_interpreter: Path) -> None:
    path = tmp_path / "0000.parquet"
    run_art(art_interpreter, WRITE_WITH_ART, str(path))
    (group,) = read_part(path)
    first, second = group.trajectories
    assert (first.reward, first.metadata, first.metrics) == (
        0.75,
        {"scenario": "paris"},
        {"turns": 2},
    )
    assert group.exceptions[0].type == "ValueError" and group.exceptions[0].trajectory is None
    calls = first.exchanges.chat_completions
    assert [c.start_time.second for c in calls] == [0, 2]
    tool_calls = calls[0].response.choices[0].message.tool_calls
    assert (
        tool_calls is not None and tool_calls[0].model_dump()["function"]["name"] == "get_weather"
    )
    # The second call's prompt extends the first call's prompt and reply: one sample, the
    # tool result (4, 5) untrained, the sampled ids trained with ART's logprobs.
    (sample,) = token_samples(first, "first")
    assert sample.tokens == (1, 2, 3, 10, 11, 4, 5, 12, 13)
    assert sample.sampled == (10, 11, 12, 13)
    assert [lp for lp, on in zip(sample.logprobs, sample.trained) if on] == pytest.approx(
        [-0.5, -0.6, -0.5, -0.6]
    )
    (alone,) = token_samples(second, "second")
    assert alone.tokens == (1, 2, 3, 20)

    # And it writes the run back in the same representation ART reads.
    import pyarrow.parquet as pq

    again = write(tmp_path / "art", group)
    (art_group,) = run_art(art_interpreter, READ_WITH_ART, str(again))
    assert [c["token_ids"] for c in art_group["trajectories"][0]["calls"]] == [
        [[10, 11]],
        [[12, 13]],
    ]
    assert pq.read_table(again).column("messages").to_pylist() == [None, None]
