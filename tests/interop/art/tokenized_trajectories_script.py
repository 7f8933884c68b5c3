"""Tokenize trajectory groups with `art.trajectories` (ART's, or arthex's under `arthex.art`: the
first argument names the package) on the cases read as JSON from stdin, and print what each
call gave, as JSON:

- `tokenize(groups, model=...)` and `tokenize(..., multi_history=True)` on each case's groups:
  per trajectory, per history, the history's kind, the model, token ids, logprobs (NaN as None)
  and flags; or, where the call is refused, that it was (a ValueError, as ART raises);
- the first-occurrence masks of each multi-history trajectory, for every `where`;
- each dump of arthex's (`cases["dumps"]`: a tokenized group's JSON) validated by this
  library and read back the same way.

Run by ART's interpreter for ART; the interop test runs arthex's cases in its own process.
"""

import asyncio
import importlib
import json
import math
import sys

from openai.types.chat.chat_completion import Choice


def with_choices(items):
    """ART validates a dumped Choice as a message dict; its readers rebuild the Choice."""
    return [Choice.model_validate(i) if "finish_reason" in i else i for i in items]


def read_group(lib, dumped):
    for trajectory in dumped["trajectories"]:
        trajectory["messages_and_choices"] = with_choices(trajectory["messages_and_choices"])
        for history in trajectory["additional_histories"]:
            history["messages_and_choices"] = with_choices(history["messages_and_choices"])
    return lib.TrajectoryGroup.model_validate(dumped)


def history(h):
    return {
        "kind": h.model_dump(mode="json")["history"]["kind"],
        "model": h.model,
        "tokens": [int(t) for t in h.tokens],
        "logprobs": [None if math.isnan(v) else v for v in h.logprobs],
        "flags": [int(f) for f in h.flags],
    }


def group(tokenized):
    return [
        {
            "id": t.trajectory.metadata["id"],
            "reward": t.reward,
            "histories": [history(h) for h in getattr(t, "histories", [t])],
        }
        for t in tokenized.trajectories
    ]


def refused(call):
    try:
        return call()
    except ValueError:
        return "refused"


def run(lib_name, cases):
    lib = importlib.import_module(f"{lib_name}.trajectories")
    flags = lib.TokenFlag
    out = {"single": [], "multi": [], "masks": [], "dumps": [], "no_model": None}
    for case in cases["groups"]:
        groups = [read_group(lib, json.loads(json.dumps(g))) for g in case]
        single = refused(lambda groups=groups: asyncio.run(lib.tokenize(groups, model="tiny")))
        out["single"].append(single if single == "refused" else [group(g) for g in single])
        multi = refused(
            lambda groups=groups: asyncio.run(
                lib.tokenize(groups, model="tiny", multi_history=True)
            )
        )
        out["multi"].append(multi if multi == "refused" else [group(g) for g in multi])
        if multi == "refused":
            continue
        for tokenized in multi:
            for t in tokenized.trajectories:
                out["masks"].append(
                    [
                        lib.first_occurrence_masks(t.histories, where=where)
                        for where in (None, flags.SAMPLED, flags.ASSISTANT, flags.EXACT)
                    ]
                )
    groups = [read_group(lib, json.loads(json.dumps(g))) for g in cases["groups"][0]]
    out["no_model"] = refused(lambda: asyncio.run(lib.tokenize(groups)))
    kind = lib.TokenizedTrajectoryGroup[lib.TokenizedTrajectory]
    for dump in cases["dumps"]:
        out["dumps"].append(group(kind.model_validate_json(dump)))
    return out


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1], json.load(sys.stdin))))
