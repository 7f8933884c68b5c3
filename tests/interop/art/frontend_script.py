"""One script, run twice: under ART 0.5.23 (`python frontend_script.py art DIR OUT`) and under
arthex (`... arthex.art DIR OUT`). It touches ART's frontend utilities through the package it
is given and writes what it saw, as JSON, to OUT; the interop test compares the two.

It writes its own trajectory file into DIR, then reads every `*.parquet` there (the other
library's file too, when it is there), so each library reads what the other wrote.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
from pathlib import Path
from typing import Any

LIB, DIR, OUT = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
art = importlib.import_module(LIB)


def module(path: str) -> Any:
    return importlib.import_module(f"{LIB}.{path}")


def choice(content: str, *, tool: bool = False) -> Any:
    from openai.types.chat.chat_completion import Choice

    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool:
        message["tool_calls"] = [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "lookup", "arguments": '{"q": "x"}'},
            }
        ]
    return Choice.model_validate(
        {
            "finish_reason": "tool_calls" if tool else "stop",
            "index": 0,
            "message": message,
            "logprobs": {
                "content": [{"token": "a", "logprob": -0.5, "bytes": [97], "top_logprobs": []}]
            },
        }
    )


TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]


def groups() -> list[Any]:
    exception = module("trajectories").PydanticException(
        type="ValueError", message="rollout failed", traceback="Traceback ..."
    )
    first = art.Trajectory(
        messages_and_choices=[
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hi"},
            choice("", tool=True),
            {"role": "tool", "content": "found", "tool_call_id": "call_1"},
            choice("hello"),
        ],
        tools=TOOLS,
        additional_histories=[
            {
                "messages_and_choices": [{"role": "user", "content": "sub"}, choice("sub-answer")],
                "tools": TOOLS,
            }
        ],
        reward=0.75,
        metrics={"turns": 2, "ok": True, "score": 0.5},
        metadata={"scenario": "s1", "seed": 7},
        logs=["first log"],
    )
    second = art.Trajectory(
        messages_and_choices=[
            {"role": "user", "content": [{"type": "text", "text": "parts"}]},
            choice("ünïcode ✓"),
        ],
        reward=-1.0,
    )
    return [
        art.TrajectoryGroup(
            trajectories=[first, second],
            exceptions=[exception],
            metadata={"batch": 3},
            metrics={"group_metric": 1.5},
            logs=["group log"],
        ),
        art.TrajectoryGroup(trajectories=[], exceptions=[exception]),  # every rollout failed
        art.TrajectoryGroup(
            trajectories=[
                art.Trajectory(
                    messages_and_choices=[{"role": "user", "content": "q"}, choice("a")], reward=1.0
                )
            ]
        ),
    ]


def message(item: Any) -> Any:
    return item.model_dump(mode="json", exclude_none=True) if hasattr(item, "model_dump") else item


def trajectory(t: Any) -> dict[str, Any]:
    return {
        "messages_and_choices": [message(m) for m in t.messages_and_choices],
        "choice_types": [type(m).__name__ for m in t.messages_and_choices],
        "tools": t.tools,
        "additional_histories": [
            {"messages_and_choices": [message(m) for m in h.messages_and_choices], "tools": h.tools}
            for h in t.additional_histories
        ],
        "reward": t.reward,
        "metrics": t.metrics,
        "metadata": t.metadata,
        "logs": t.logs,
    }


def group(g: Any) -> dict[str, Any]:
    return {
        "trajectories": [trajectory(t) for t in g.trajectories],
        "exceptions": [[e.type, e.message, e.traceback] for e in g.exceptions],
        "metadata": g.metadata,
        "metrics": g.metrics,
        "logs": g.logs,
    }


def error(call: Any) -> str:
    try:
        call()
    except ValueError:
        return "ValueError"
    except Exception as caught:
        return type(caught).__name__
    return "no error"


def trajectory_files(out: dict[str, Any]) -> None:
    files = module("utils.trajectory_logging")
    name = "art" if LIB == "art" else "arthex"
    files.write_trajectory_groups_parquet(groups(), DIR / f"{name}.parquet")
    files.write_trajectory_groups_parquet([], DIR / f"{name}-empty.parquet")
    import pyarrow.parquet as pq

    meta = pq.ParquetFile(DIR / f"{name}.parquet").metadata
    out["written"] = {
        "columns": pq.read_schema(DIR / f"{name}.parquet").names,
        "rows": meta.num_rows,
        "codec": meta.row_group(0).column(0).compression,
        "version": pq.read_schema(DIR / f"{name}.parquet")
        .metadata[b"art.trajectory_parquet.version"]
        .decode(),
    }
    for path in sorted(DIR.glob("*.parquet")):
        if path.name.startswith("bad-"):
            out[f"read {path.name}"] = error(lambda p=path: files.read_trajectory_groups_parquet(p))
        else:
            out[f"read {path.name}"] = [
                group(g) for g in files.read_trajectory_groups_parquet(path)
            ]


def small_helpers(out: dict[str, Any]) -> None:
    strip = module("utils.strip_logprobs").strip_logprobs
    nested = {"a": [{"logprobs": [1], "b": (1, {"logprobs": 2, "c": 3})}], "logprobs": None}
    out["strip dict"] = json.loads(json.dumps(strip(nested)))
    original = choice("kept")
    stripped = strip(original)
    out["strip choice"] = [
        stripped.logprobs,
        original.logprobs is not None,
        stripped.message.content,
        type(stripped).__name__,
    ]

    async def rollout(reward: float) -> None:
        await asyncio.sleep(0)
        art.yield_trajectory(
            art.Trajectory(messages_and_choices=[{"role": "user", "content": "y"}], reward=reward)
        )

    async def silent() -> None:
        await asyncio.sleep(0)

    async def main() -> list[Any]:
        got = await asyncio.gather(*(art.capture_yielded_trajectory(rollout(r)) for r in (1, 2)))
        try:
            await art.capture_yielded_trajectory(silent())
            missing = "no error"
        except RuntimeError as caught:
            missing = str(caught)
        return [[t.reward for t in got], missing]

    out["yield"] = asyncio.run(main())


def main() -> None:
    out: dict[str, Any] = {}
    for part in sys.argv[4:] or ["trajectory_files", "small_helpers"]:
        globals()[part](out)
    OUT.write_text(json.dumps(out, indent=1, sort_keys=True, default=str))


main()
