"""ART's frontend utilities under `arthex.art` do what ART 0.5.23's do: one script
(art/frontend_script.py) runs under `art` and under `arthex.art` in ART's venv (arthex from this
checkout), and what each saw must be equal: the trajectory files each writes and reads
(including the other's, ART's v1 layout and broken files), `strip_logprobs`,
`yield_trajectory`, and the cost and metric utilities (`art.costs`, `art.api_costs` with
LiteLLM's prices, `MetricsBuilder`'s roll-ups and running totals, `art.metrics_taxonomy`), and
`art.utils.sft`'s chunking, schedules and file streaming, `art.utils.litellm` on a real
LiteLLM choice, `keep_recent_and_top` on ART's checkpoint retention context, and
`art.utils.trajectory_migration` (each library reads the other's JSONL and migrates it)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from .art_env import SCRIPTS, art_environment, art_python, checkout_pyroot

pytestmark = pytest.mark.interop


def run_script(lib: str, directory: Path, tmp: Path, *parts: str) -> dict[str, Any]:
    out = tmp / f"{lib}-{len(list(tmp.glob('*.json')))}.json"
    env = art_environment()
    if lib != "art":
        env["PYTHONPATH"] = str(checkout_pyroot(tmp))
    done = subprocess.run(
        [
            str(art_python()),
            str(SCRIPTS / "frontend_script.py"),
            lib,
            str(directory),
            str(out),
            *parts,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def write_v1_file(path: Path) -> None:
    """ART's first trajectory layout, as its files hold it: the analytics columns alone."""
    message = pa.struct(
        [
            ("role", pa.string()),
            ("content", pa.string()),
            ("tool_calls", pa.string()),
            ("tool_call_id", pa.string()),
            ("trainable", pa.bool_()),
        ]
    )
    calls = json.dumps(
        [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    )
    rows = [
        {
            "group_index": 0,
            "group_metadata": '{"batch": 1}',
            "group_metrics": "not json",
            "group_logs": ["g"],
            "reward": 1.0,
            "metrics": '{"m": 2}',
            "metadata": None,
            "tools": None,
            "logs": ["t"],
            "messages": [
                {
                    "role": "user",
                    "content": "q",
                    "tool_calls": None,
                    "tool_call_id": None,
                    "trainable": False,
                },
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": calls,
                    "tool_call_id": None,
                    "trainable": True,
                },
                {
                    "role": "tool",
                    "content": "r",
                    "tool_calls": None,
                    "tool_call_id": "c",
                    "trainable": False,
                },
            ],
        },
        {
            "group_index": 2,
            "group_metadata": None,
            "group_metrics": None,
            "group_logs": None,
            "reward": 0,
            "metrics": None,
            "metadata": '{"k": "v"}',
            "tools": None,
            "logs": None,
            "messages": [],
        },
        {
            "group_index": 1,
            "group_metadata": None,
            "group_metrics": None,
            "group_logs": None,
            "reward": None,
            "metrics": None,
            "metadata": None,
            "tools": None,
            "logs": None,
            "messages": None,
        },  # a failed group's placeholder: v1 readers drop it
    ]
    schema = pa.schema(
        [
            ("group_index", pa.int64()),
            ("group_metadata", pa.string()),
            ("group_metrics", pa.string()),
            ("group_logs", pa.list_(pa.string())),
            ("reward", pa.float64()),
            ("metrics", pa.string()),
            ("metadata", pa.string()),
            ("tools", pa.string()),
            ("logs", pa.list_(pa.string())),
            ("messages", pa.list_(message)),
        ]
    )
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)


def write_broken_files(directory: Path, good: Path) -> None:
    table = pq.read_table(good)
    pq.write_table(
        table.replace_schema_metadata({b"art.trajectory_parquet.version": b"3"}),
        directory / "bad-version.parquet",
    )
    pq.write_table(table.drop_columns(["format_version"]), directory / "bad-unmarked.parquet")
    pq.write_table(
        table.set_column(1, "group_index", pa.array([0, 0, 2, 3], pa.int64())),
        directory / "bad-gap.parquet",
    )
    (directory / "bad-not-parquet.parquet").write_text("not a parquet file")


def test_frontend_utilities_match_art(tmp_path: Path) -> None:
    files = tmp_path / "files"
    files.mkdir()
    write_v1_file(files / "v1.parquet")
    first = run_script("arthex.art", files, tmp_path)  # writes arthex.parquet
    write_broken_files(files, files / "arthex.parquet")
    art = run_script("art", files, tmp_path)  # reads arthex's file, writes its own
    arthex = run_script("arthex.art", files, tmp_path)  # reads ART's file
    assert set(art) == set(arthex)
    for key in sorted(art):
        assert arthex[key] == art[key], key
    # what was compared is what the script set out to write, read back by both libraries
    written = art["read art.parquet"]
    assert art["read arthex.parquet"] == written == first["read arthex.parquet"]
    assert [len(g["trajectories"]) for g in written] == [2, 0, 1]
    assert written[1]["exceptions"] == [["ValueError", "rollout failed", "Traceback ..."]]
    assert written[0]["trajectories"][0]["choice_types"][2] == "Choice"
    assert art["read art-empty.parquet"] == []
    v1 = art["read v1.parquet"]
    assert [[t["reward"] for t in g["trajectories"]] for g in v1] == [[1.0], [0.0]]
    assert v1[0]["trajectories"][0]["messages_and_choices"][1]["tool_calls"][0]["id"] == "c"
    assert {k: v for k, v in art.items() if k.startswith("read bad-")} == {
        f"read bad-{name}.parquet": "ValueError"
        for name in ("gap", "not-parquet", "unmarked", "version")
    }
    assert art["written"]["codec"] == "ZSTD" and art["written"]["version"] == "2"
    assert art["yield"] == [[1.0, 2.0], "No trajectory yielded"]
    assert art["strip choice"] == [None, True, "kept", "Choice"]
    # costs, worked by hand: 1000 uncached prompt tokens at $2/M, 200 cached at $0.5/M and
    # 300 completion tokens at $8/M; LiteLLM's price list (installed in ART's venv) is used
    assert art["api openai"] == 0.0045
    assert isinstance(art["api litellm"], float) and art["api litellm"] > 0
    assert art["flush 1"]["costs/all"] == 1.7518 and art["flush 2"]["costs/cum/all"] == 2.7518
    assert art["api unknown model"].startswith("ValueError: No pricing configured")
    assert art["litellm choice"][0] == "Choice"
    assert art["retention"][1] == [3, 7, 9]
    # ART reads arthex's JSONL and migrates it; a file that is not JSONL is an error, no part
    assert art["migrated arthex-groups.jsonl"][:4] == [1, 0, 1, ["0001.parquet", "0002.jsonl"]]
    assert len(art["sft chunks"]) == 3 and art["sft rows"] == 9 and len(art["sft stream"]) == 15
