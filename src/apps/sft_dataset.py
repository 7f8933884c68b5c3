"""`arthex.load_sft_dataset(path)`: chat data for `model.train_sft`, from JSONL or parquet.

Both hold records in the OpenAI fine-tuning format: `{"messages": [...], "tools": [...]}`,
assistant messages optionally with `weight` 0 or 1. JSONL has one record per line (blank lines
are skipped); parquet has a `messages` column (a list of structs, or JSON text) and optionally
`tools`. Every record is checked as `train_sft` checks it, and the first bad one is an
InvalidInputError naming the file and its line (or row), before anything is returned.

Parquet stores a list of structs with one schema for all of them, so a key that only some
messages have (`tool_calls`, `weight`) reads back as null on the others: nulls are dropped
from the messages, which is what the writer meant.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..core.conversations import Conversation, conversation_from
from ..core.errors import InvalidInputError, MissingExtraError

__all__ = ["load_sft_dataset"]


def load_sft_dataset(path: str | os.PathLike[str]) -> list[Conversation]:
    """The conversations in a `.jsonl` or `.parquet` file, validated, in file order."""
    source = Path(path)
    if not source.is_file():
        raise InvalidInputError(f"no SFT dataset at {source}: the file does not exist")
    suffix = source.suffix.lower()
    if suffix in (".jsonl", ".json"):
        records = _jsonl(source)
    elif suffix == ".parquet":
        records = _parquet(source)
    else:
        raise InvalidInputError(
            f"{source}: unknown dataset format {suffix!r}; use .jsonl (one JSON record per "
            "line) or .parquet (a 'messages' column)"
        )
    conversations = [conversation_from(record, where) for where, record in records]
    if not conversations:
        raise InvalidInputError(f"{source} holds no conversations")
    return conversations


def _jsonl(source: Path) -> Iterator[tuple[str, object]]:
    with source.open("rb") as lines:
        for number, raw in enumerate(lines, start=1):
            where = f"{source} line {number}"
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InvalidInputError(f"{where}: not UTF-8 text ({exc})") from None
            if not text.strip():
                continue
            try:
                record = json.loads(text)
            except json.JSONDecodeError as exc:
                raise InvalidInputError(f"{where}: not a JSON record ({exc.msg})") from None
            if not isinstance(record, dict):
                raise InvalidInputError(
                    f"{where}: expected a JSON object with 'messages', got {type(record).__name__}"
                )
            yield where, record


def _parquet(source: Path) -> Iterator[tuple[str, object]]:
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:  # pragma: no cover - pyarrow is a core dependency
        raise MissingExtraError("pyarrow", "all") from exc
    try:
        table = pq.read_table(str(source))
    except Exception as exc:
        raise InvalidInputError(f"{source}: not a readable parquet file ({exc})") from None
    if "messages" not in table.column_names:
        raise InvalidInputError(
            f"{source}: no 'messages' column (columns: {table.column_names}); SFT parquet "
            "files hold the OpenAI fine-tuning format"
        )
    keep = [name for name in ("messages", "tools") if name in table.column_names]
    for index, row in enumerate(table.select(keep).to_pylist()):
        where = f"{source} row {index}"
        record = {key: _decoded(value, where, key) for key, value in row.items()}
        if record.get("tools") is None:
            record.pop("tools", None)
        yield where, record


def _decoded(value: Any, where: str, column: str) -> Any:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise InvalidInputError(
                f"{where}: '{column}' is text but not JSON ({exc.msg})"
            ) from None
    if column == "messages" and isinstance(value, list):
        # a null content is meaningful (an assistant turn that only calls tools): keep it
        return [
            {**_without_nulls(m), "content": None}
            if isinstance(m, dict) and "content" in m and m["content"] is None
            else _without_nulls(m)
            for m in value
        ]
    return _without_nulls(value)


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(item) for item in value]
    return value
