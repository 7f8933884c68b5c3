"""ART 0.5.23's MCP scenario utilities and arthex's under `arthex.art.mcp` give the same
outcomes on the same cases (art/mcp_script.py, one script for both): the tool and resource
types, scenarios and their collection (JSON forms, split, filter, summary, refusals), and
`generate_scenarios` against one scripted generator on loopback, which both reach over HTTP
with the openai client. The generator's requests are compared for what both must ask: the
model, a JSON-schema answer of the asked count, and the tools in the prompt."""

from __future__ import annotations

import json
from typing import Any

from tests.e2e._chat_server import ScriptedChatServer

from .art_env import both_outcomes

TOOLS = [
    {"name": "search", "description": "Search the docs",
     "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}},
    {"name": "bare"},
]  # fmt: skip
RESOURCES = [
    {"uri": "file:///notes.md", "name": "notes", "description": "Notes", "mimeType": "text/md"},
    {"uri": "db://x", "name": "x", "description": "", "mime_type": "application/x"},
    {"uri": "u", "name": "n", "description": "d"},
]
COLLECTION = [
    {"task": "Find the install steps and summarize them", "difficulty": 1},
    {"task": "Compare two releases' notes and report the differences", "difficulty": 4},
    {"task": "List every page that mentions GPUs", "difficulty": 2},
    {"task": "Audit the docs for broken links and write a report", "difficulty": 5},
    {"task": "Explain the config file", "difficulty": 2},
]
GENERATED = {"scenarios": COLLECTION[:3]}


def test_art_and_arthex_agree_on_mcp_scenarios() -> None:
    server = ScriptedChatServer(lambda request: json.dumps(GENERATED))
    server.thread.start()
    try:
        cases: dict[str, Any] = {
            "tools": TOOLS,
            "resources": RESOURCES,
            "scenarios": [
                {"task": "t", "difficulty": 3},
                {"task": "t", "difficulty": 0},
                {"task": "t", "difficulty": 6},
                {"task": "t", "difficulty": 2.5},
                {"task": "t", "difficulty": "3"},
            ],
            "tasks": ["short", "exactly 10", "a task longer than ten", "trailing   spaces here"],
            "json": [
                json.dumps({"scenarios": COLLECTION[:2]}),
                json.dumps(COLLECTION[2:]),
                json.dumps({"items": COLLECTION[:1]}),
                json.dumps({"scenarios": [{"task": "t", "difficulty": 9}]}),
            ],
            "collection": COLLECTION,
            "train_size": 3,
            "counts": [3, 2],
            "base_url": server.base_url,
        }
        art, arthex = both_outcomes("mcp_script", cases)
    finally:
        server.httpd.shutdown()
        server.httpd.server_close()
    assert arthex == art
    # each library asked twice (3 then 2 scenarios); the answer of 3 was refused for 2
    assert art["generated"] == [COLLECTION[:3], "ValueError"]
    assert art["scenarios"] == [{"task": "t", "difficulty": 3}, *["ValueError"] * 4]
    assert len(server.requests) == 4
    for request in server.requests:
        assert request["model"] == "scripted"
        assert request["response_format"]["type"] == "json_schema"
        (message,) = request["messages"]
        assert '"name": "search"' in message["content"] and "file:///notes.md" in message["content"]
    art_asks, arthex_asks = server.requests[:2], server.requests[2:]
    for art_request, arthex_request in zip(art_asks, arthex_asks, strict=True):
        schemas = [
            r["response_format"]["json_schema"]["schema"] for r in (art_request, arthex_request)
        ]
        assert schemas[0] == schemas[1]
