"""Groups as both sides can agree on them: arthex's and ART's JSON dumps reduced to what the
two models share (ART's Trajectory has fields arthex does not model, and writes exception types
as `<class 'X'>`), so `canonical(a) == canonical(b)` means the same rollouts."""

from __future__ import annotations

import re
from typing import Any

_CLASS = re.compile(r"<class '(?:builtins\.)?([^']+)'>")


def canonical(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "metadata": group.get("metadata") or {},
            "metrics": group.get("metrics") or {},
            "logs": group.get("logs") or [],
            "exceptions": [
                (_exception_type(e["type"]), e["message"]) for e in group.get("exceptions") or []
            ],
            "trajectories": [_trajectory(t) for t in group.get("trajectories") or []],
        }
        for group in groups
    ]


def _exception_type(kind: str) -> str:
    match = _CLASS.fullmatch(kind)
    return match.group(1) if match else kind


def first_difference(a: Any, b: Any, path: str = "") -> str | None:
    """Where two JSON values first differ, for a readable assertion message."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            if key not in a or key not in b:
                return f"{path}.{key}: only in {'second' if key not in a else 'first'}"
            found = first_difference(a[key], b[key], f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        if len(a) != len(b):
            return f"{path}: {len(a)} items != {len(b)} items"
        for i, (x, y) in enumerate(zip(a, b)):
            found = first_difference(x, y, f"{path}[{i}]")
            if found:
                return found
        return None
    return None if a == b else f"{path}: {a!r:.200} != {b!r:.200}"


def _trajectory(t: dict[str, Any]) -> dict[str, Any]:
    return {
        "reward": t.get("reward", 0.0),  # ART leaves a default reward out of its dump
        "metrics": t.get("metrics") or {},
        "metadata": t.get("metadata") or {},
        "logs": t.get("logs") or [],
        "tools": t.get("tools"),
        "messages": [_item(i) for i in t.get("messages_and_choices") or []],
        "histories": [
            {
                "messages": [_item(i) for i in h.get("messages_and_choices") or []],
                "tools": h.get("tools"),
            }
            for h in t.get("additional_histories") or []
        ],
    }


def _item(item: dict[str, Any]) -> dict[str, Any]:
    if "finish_reason" not in item:
        return {k: v for k, v in item.items() if v is not None}
    message = item.get("message") or {}
    logprobs = (item.get("logprobs") or {}).get("content") or []
    return {
        "finish_reason": item["finish_reason"],
        "role": message.get("role"),
        "content": message.get("content"),
        "tool_calls": [
            (c["id"], c["function"]["name"], c["function"]["arguments"])
            for c in message.get("tool_calls") or []
        ],
        "logprobs": [(lp["token"], lp["logprob"]) for lp in logprobs],
        "token_ids": item.get("token_ids"),
        "prompt_token_ids": item.get("prompt_token_ids"),
    }
