"""Write and read the compact envelope with `art.trajectories` (ART's, or arthex's under
`arthex.art`: the first argument names the package) on the cases read as JSON from stdin, and
print, as JSON: each value's envelope (`compact_dump`), what reading it back gives
(`compact_validate`, `compact_validate_json` where it holds no NaN), and what reading the
other library's envelopes (`cases["payloads"]`) gives, each summarised as plain fields.

Run by ART's interpreter for ART; the interop test runs arthex's cases in its own process.
"""

import asyncio
import importlib
import json
import math
import sys

from openai.types.chat.chat_completion import Choice


def with_choices(items):
    return [Choice.model_validate(i) if "finish_reason" in i else i for i in items]


def read_group(lib, dumped):
    for trajectory in dumped["trajectories"]:
        trajectory["messages_and_choices"] = with_choices(trajectory["messages_and_choices"])
    return lib.TrajectoryGroup.model_validate(dumped)


def summary(value):
    if isinstance(value, list):
        return [summary(item) for item in value]
    name = type(value).__name__.split("[")[0]
    if name == "Trajectory":
        return {"id": value.metadata["id"], "reward": value.reward,
                "items": len(value.messages_and_choices)}  # fmt: skip
    if name == "TrajectoryGroup":
        return {"trajectories": summary(value.trajectories), "metadata": value.metadata}
    if name == "TokenizedTrajectoryGroup":
        return {"group": summary(value.trajectory_group), "items": summary(value.trajectories)}
    out = {"type": name}
    if hasattr(value, "trajectory"):
        out["trajectory"] = summary(value.trajectory)
    for h in getattr(value, "histories", [value] if hasattr(value, "tokens") else []):
        out.setdefault("histories", []).append({
            "kind": h.model_dump(mode="json")["history"]["kind"], "model": h.model,
            "tokens": list(h.tokens), "flags": [int(f) for f in h.flags],
            "logprobs": [None if math.isnan(v) else v for v in h.logprobs],
        })  # fmt: skip
    return out


def run(lib_name, cases):
    lib = importlib.import_module(f"{lib_name}.trajectories")
    groups = [read_group(lib, json.loads(json.dumps(g))) for g in cases["groups"]]
    [single, *_] = asyncio.run(lib.tokenize(groups, model="tiny"))
    [multi] = asyncio.run(lib.tokenize(groups[:1], model="tiny", multi_history=True))
    values = {
        "trajectory": groups[0].trajectories[0],
        "trajectory_group": groups[0],
        "trajectories": groups[1].trajectories,
        "tokenized_history": multi.trajectories[0].histories[0],
        "tokenized_trajectory": single.trajectories[1],
        "tokenized_multi_history_trajectory": multi.trajectories[0],
        "tokenized_trajectory_group": single,
        "tokenized_trajectory_groups": asyncio.run(lib.tokenize(groups, model="tiny")),
    }
    out = {"payloads": {}, "own": {}, "own_json": {}, "theirs": {}}
    for name, value in values.items():
        payload = lib.compact_dump(value)
        out["payloads"][name] = payload
        out["own"][name] = summary(lib.compact_validate(payload))
        if name.startswith("trajector"):  # no NaN logprobs: valid JSON
            out["own_json"][name] = summary(lib.compact_validate_json(json.dumps(payload)))
    for name, payload in cases["payloads"].items():
        out["theirs"][name] = summary(lib.compact_validate(payload))
    return out


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1], json.load(sys.stdin))))
