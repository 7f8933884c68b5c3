"""`arthex.load_sft_dataset`: JSONL and parquet files in the OpenAI fine-tuning format, with
errors that name the file and the line (or row)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import arthex
from arthex.core.errors import InvalidInputError

RECORDS: list[dict[str, Any]] = [
    {
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": "4"},
        ]
    },
    {
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                    }
                ],
                "weight": 0,
            },
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
            {"role": "assistant", "content": "Sunny."},
        ],
        "tools": [{"type": "function", "function": {"name": "get_weather"}}],
    },
]


def _jsonl(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def test_jsonl_records_load_in_order_with_tools_and_weights(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "data.jsonl", [json.dumps(r) for r in RECORDS[:1]] + ["", "  "])
    path.write_text(path.read_text() + json.dumps(RECORDS[1]) + "\n")
    loaded = arthex.load_sft_dataset(path)
    assert [c.to_json() for c in loaded] == RECORDS


def test_parquet_with_a_list_of_structs_loads_like_the_jsonl(tmp_path: Path) -> None:
    # the schema comes from the first row; keys other messages lack become nulls there
    table = pa.Table.from_pylist(RECORDS[::-1])
    pq.write_table(table, tmp_path / "data.parquet")
    loaded = arthex.load_sft_dataset(tmp_path / "data.parquet")
    assert [c.to_json() for c in loaded] == RECORDS[::-1]


def test_parquet_with_json_text_columns_loads_too(tmp_path: Path) -> None:
    rows = [{"messages": json.dumps(r["messages"]), "tools": None} for r in RECORDS[:1]]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "text.parquet")
    assert [c.to_json() for c in arthex.load_sft_dataset(tmp_path / "text.parquet")] == [RECORDS[0]]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"messages": [', "line 2: not a JSON record"),
        ('["just", "a", "list"]', "line 2: expected a JSON object"),
        (
            '{"messages": [{"role": "user", "content": "x"}, {"role": "helper", "content": "y"}]}',
            "line 2, message 1: role 'helper'",
        ),
        ('{"messages": [{"role": "user", "content": "x"}]}', "line 2: no assistant message"),
        ('{"prompt": "x", "completion": "y"}', "line 2: unknown key"),
    ],
)
def test_a_bad_line_is_named(tmp_path: Path, line: str, message: str) -> None:
    path = _jsonl(tmp_path / "bad.jsonl", [json.dumps(RECORDS[0]), line, json.dumps(RECORDS[0])])
    with pytest.raises(InvalidInputError, match=message) as caught:
        arthex.load_sft_dataset(path)
    assert str(path) in str(caught.value)


def test_a_bad_parquet_row_is_named(tmp_path: Path) -> None:
    rows = [{"messages": json.dumps(RECORDS[0]["messages"])}, {"messages": '[{"role": "user"}]'}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "bad.parquet")
    with pytest.raises(InvalidInputError, match=r"row 1, message 0: 'content' is missing"):
        arthex.load_sft_dataset(tmp_path / "bad.parquet")


def test_missing_empty_unknown_and_column_less_files_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="does not exist"):
        arthex.load_sft_dataset(tmp_path / "none.jsonl")
    with pytest.raises(InvalidInputError, match="holds no conversations"):
        arthex.load_sft_dataset(_jsonl(tmp_path / "empty.jsonl", [""]))
    (tmp_path / "data.csv").write_text("a,b\n")
    with pytest.raises(InvalidInputError, match=r"unknown dataset format '\.csv'"):
        arthex.load_sft_dataset(tmp_path / "data.csv")
    pq.write_table(pa.Table.from_pylist([{"text": "x"}]), tmp_path / "other.parquet")
    with pytest.raises(InvalidInputError, match="no 'messages' column"):
        arthex.load_sft_dataset(tmp_path / "other.parquet")
    (tmp_path / "broken.parquet").write_bytes(b"not parquet")
    with pytest.raises(InvalidInputError, match="not a readable parquet file"):
        arthex.load_sft_dataset(tmp_path / "broken.parquet")
    (tmp_path / "latin.jsonl").write_bytes(b'{"messages": "\xe9"}\n')
    with pytest.raises(InvalidInputError, match="line 1: not UTF-8"):
        arthex.load_sft_dataset(tmp_path / "latin.jsonl")
