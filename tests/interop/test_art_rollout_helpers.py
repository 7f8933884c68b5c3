"""ART 0.5.23's rollout helpers and arthex's under `arthex.art` give the same outcomes on the
same cases (art/rollout_helpers_script.py, one script for both): `art.openai`'s stream
consumers on recorded chunk sequences (text with logprobs and token ids, tool calls over two
choices, a legacy function call, an empty prologue, streams cut short, an early stop),
`art.guided_completion` on tools and teacher completions, and `art.gather`'s context helpers
(completion tokens, recorded sums, the wrappers' failure budget, and what rollouts record
into a running `gather_trajectory_groups`), and `art.adapter_leases`' pins read back at each
level of nested pins; `art.model`'s metric splits and sections, judge replies through
`art.rewards.ruler.Response` and HTTP errors through `art.utils.log_http_errors`."""

from __future__ import annotations

from typing import Any

from .art_env import both_outcomes

HEAD = {"id": "c1", "object": "chat.completion.chunk", "created": 7, "model": "m"}


def chunk(*choices: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {**HEAD, "choices": list(choices), **fields}


def delta(index: int = 0, finish: str | None = None, **parts: Any) -> dict[str, Any]:
    extra: dict[str, Any] = {k: parts.pop(k) for k in ("logprobs", "token_ids") if k in parts}
    return {"index": index, "delta": parts, "finish_reason": finish, **extra}


def top(token: str, logprob: float) -> dict[str, Any]:
    return {"token": token, "logprob": logprob, "bytes": list(token.encode()), "top_logprobs": []}


USAGE = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
TEXT = [
    chunk(delta(role="assistant", content="", logprobs={"content": []}), prompt_token_ids=[1, 2]),
    chunk(delta(content="Hel", logprobs={"content": [top("Hel", -0.5)]}, token_ids=[10])),
    chunk(
        delta(content="lo", finish="stop", logprobs={"content": [top("lo", -0.2)]}, token_ids=[11])
    ),
    chunk(usage=USAGE),
]
CALL = {
    "index": 0,
    "id": "call_",
    "type": "function",
    "function": {"name": "get_", "arguments": '{"ci'},
}
MORE = {"index": 0, "id": "9", "function": {"name": "weather", "arguments": 'ty": "Oslo"}'}}
SECOND = {
    "index": 1,
    "id": "c2",
    "type": "function",
    "function": {"name": "now", "arguments": "{}"},
}
TOOLS = [
    chunk(delta(1, role="assistant", reasoning_content="think")),
    chunk(delta(0, role="assistant", tool_calls=[CALL])),
    chunk(
        delta(0, tool_calls=[MORE, SECOND], finish="tool_calls"),
        delta(1, content="ok", finish="length"),
    ),
    chunk(prompt_token_ids=[5, 6], system_fingerprint="fp", service_tier="default"),
]
LEGACY = [
    chunk(delta(role="assistant", function_call={"name": "lo", "arguments": '{"a"'})),
    chunk(delta(function_call={"name": "okup", "arguments": ": 1}"}, refusal="no")),
    chunk(delta(refusal=" thanks", finish="function_call")),
]
PROLOGUE = {"id": "", "object": "", "created": 0, "model": "", "choices": []}
STREAMS = [
    {"chunks": TEXT, "require_usage": True},
    {"chunks": TOOLS},
    {"chunks": LEGACY},
    {"chunks": [PROLOGUE, *TEXT]},
    {"chunks": TEXT[:2]},  # ends before the choice finished
    {"chunks": []},
    {"chunks": TEXT[:3], "require_usage": True},  # no usage trailer
    {"chunks": TEXT, "stop_at": 2},  # on_chunk stops it after "Hel"
    {"chunks": [chunk(delta(tool_calls=[{"index": -1}], finish="stop"))]},
]  # fmt: skip

CITY = {"type": "object", "properties": {"city": {"type": "string"}}}
WEATHER = {"type": "function",
           "function": {"name": "get_weather", "description": "d", "parameters": CITY}}  # fmt: skip
CLOCK = {"type": "function", "function": {"name": "now"}}
FREEZE = [
    [WEATHER, {"city": "Oslo", "days": 3, "scale": 1.5, "metric": True, "note": None}],
    [WEATHER, {"hours": [1, 2], "where": {"a": 1}, "Weird Key": "v", "snake_case_name": 0}],
    [CLOCK, {}],
]


def teacher(content: str | None, *calls: tuple[str, str]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {"id": f"c{i}", "type": "function", "function": {"name": n, "arguments": a}}
            for i, (n, a) in enumerate(calls)
        ]
    return {"id": "t", "object": "chat.completion", "created": 0, "model": "teacher",
            "choices": [{"index": 0, "finish_reason": "stop", "message": message}]}  # fmt: skip


TEACHERS = [
    [teacher(None, ("get_weather", '{"city": "Oslo", "days": 2}'), ("now", "{}")),
     [CLOCK, WEATHER]],
    [teacher("Sunny."), None],
    [teacher(None, ("now", "{}")), [CLOCK]],
]  # fmt: skip

TRAJECTORIES = [
    {"reward": 1.0, "metrics": {"m": 2}, "tokens": [3, 4]},
    {"reward": 0.5, "tokens": [3], "extra": [5]},
    {"reward": 0.0, "metrics": {"m": 4, "ok": True}, "tokens": [3, None]},
    {"reward": 0.25, "tokens": [0]},
    {"reward": 2.0},
]
WRAPS = [
    [1, [[1.0, 0.0], None, [0.5], None, [2.0]]],  # the second failure is one too many
    [2, [None, [1.0], None]],
    [0, [[0.5, 0.5]]],
]
RUNNING = [
    {"reward": 1.0, "metrics": {"m": 2}, "records": 5.0},
    {"reward": 0.0, "metrics": {"m": 4}},
    {"reward": 0.5, "records": 1.0},
]

PINS = [["m", 2, None], ["other", 0, "other-exact"], ["m", 1, "m-exact"], ["m", 0, None]]

REPLIES = [
    '{"scores": [{"trajectory_id": "1", "explanation": "ok", "score": 0.5}]}',
    '{"scores": []}',
]
HTTP = [[404, '{"detail": "no such model"}'], [500, "<html>oops</html>"], [422, "[1]"]]


def test_the_rollout_helpers_give_arts_outcomes() -> None:
    cases = {
        "streams": STREAMS,
        "guided": {"freeze": FREEZE, "teachers": TEACHERS},
        "gather": {"trajectories": TRAJECTORIES, "wraps": WRAPS, "running": RUNNING},
        "leases": {"models": ["m", "other"], "pins": PINS},
        "small": {"replies": REPLIES, "http": HTTP},
    }
    art, ours = both_outcomes("rollout_helpers_script", cases)
    for name, theirs in art["streams"][0]["async"]["completion"]["choices"][0].items():
        assert ours["streams"][0]["async"]["completion"]["choices"][0][name] == theirs, name
    assert ours["streams"] == art["streams"]
    assert ours["guided"] == art["guided"]
    assert ours["gather"] == art["gather"]
    assert ours["leases"] == art["leases"]
    assert ours["small"]["splits"] == art["small"]["splits"]
    assert set(art["small"]["sections"]) <= set(ours["small"]["sections"])  # arthex adds two
    assert set(ours["small"]["sections"]) - set(art["small"]["sections"]) == {
        "optim",
        "diagnostics",
    }
    assert (ours["small"]["replies"], ours["small"]["http"]) == (
        art["small"]["replies"],
        art["small"]["http"],
    )
    assert art["small"]["http"] == [
        "[HTTP 404] http://trainer.test/v1/jobs no such model",
        "original",
        "original",
    ]
    # the cases reach what they are about (ART's outcomes, not arthex's, checked here)
    assert [s["async"].get("error") for s in art["streams"]][4:7] == ["incomplete"] * 3
    assert art["streams"][7]["closed"] and art["streams"][8]["async"] == {"error": "value"}
    assert [m.get("completion_tokens") for m in art["gather"]["stamped"]] == [
        7,
        8,
        None,
        None,
        None,
    ]
    assert art["gather"]["wraps"][0][0][-1] == "raised"
    assert art["leases"][3] == [
        [1, "m-exact", None, "m-exact", None],
        [0, "other-exact", "other-exact", None, None],
    ]
