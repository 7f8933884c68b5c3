"""ART's v2 trajectory parquet layout: its columns, its version key and how parts are written.

The format only; where parts live and how they are published is the store's business
(store.py, publishing in step_file.py, local_disk.py and object_store.py), so tools that read
parts (the CLI, loaders) need not know about storage. Groups become rows in encoding.py and
rows become groups again in decoding.py.

`group_json` and `trajectory_json` are authoritative (`AUTHORITATIVE`), the other columns are
an analytics view derived from them.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

FORMAT_VERSION = 2
VERSION_KEY = b"art.trajectory_parquet.version"

MESSAGE_TYPE = pa.struct(
    [
        pa.field("role", pa.string()),
        pa.field("content", pa.string()),
        pa.field("tool_calls", pa.string()),
        pa.field("tool_call_id", pa.string()),
        pa.field("trainable", pa.bool_()),
    ]
)
SCHEMA = pa.schema(
    [
        pa.field("format_version", pa.int16()),
        pa.field("group_index", pa.int64()),
        pa.field("trajectory_index", pa.int64()),
        pa.field("group_json", pa.large_string()),
        pa.field("trajectory_json", pa.large_string()),
        pa.field("group_metadata", pa.string()),
        pa.field("group_metrics", pa.string()),
        pa.field("group_logs", pa.list_(pa.string())),
        pa.field("reward", pa.float64()),
        pa.field("metrics", pa.string()),
        pa.field("metadata", pa.string()),
        pa.field("tools", pa.string()),
        pa.field("logs", pa.list_(pa.string())),
        pa.field("messages", pa.list_(MESSAGE_TYPE)),
    ],
    metadata={VERSION_KEY: str(FORMAT_VERSION).encode()},
)
AUTHORITATIVE = ["format_version", "group_index", "trajectory_index", "group_json",
                 "trajectory_json"]  # fmt: skip

# zstd as ART writes it. Dictionary encoding stays on where values repeat (group columns,
# tools, roles) and is off for `trajectory_json`, where every value is unique and large:
# pyarrow would hash each one before giving up on the dictionary. Min/max statistics of JSON
# documents help no query, so they are not computed for the two JSON columns.
_LEAVES = [
    "format_version", "group_index", "trajectory_index", "group_json", "group_metadata",
    "group_metrics", "group_logs.list.element", "reward", "metrics", "metadata", "tools",
    "logs.list.element", "messages.list.element.role", "messages.list.element.content",
    "messages.list.element.tool_calls", "messages.list.element.tool_call_id",
    "messages.list.element.trainable",
]  # fmt: skip
WRITE_OPTIONS: dict[str, Any] = {
    "compression": "zstd",
    "use_dictionary": _LEAVES,
    "write_statistics": [c for c in _LEAVES if c != "group_json"],
}
