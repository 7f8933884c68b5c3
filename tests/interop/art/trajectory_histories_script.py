"""Build ART's trajectory data model (ART's, or arthex's under `arthex.art`: the first argument
names the package) from the cases read as JSON from stdin, and print, as JSON, each object's
`model_dump(mode="json")`:

- `histories`: each trajectory's `chat_completions_histories(...)` or the case's `method`
  (or the error it raised), in chat form where the case says `as_chat`; arthex spells each
  method as a function (`ARTHEX_FUNCTIONS`);
- `valid`: each `[class name, JSON]` validated by that class and dumped again;
- `rejected`: for each `[class name, JSON]`, whether validation refused it.

Under ART, `art_only` also holds the dumps of the histories arthex reads but does not derive
yet (Responses).

Run by ART's interpreter for ART; the interop test runs arthex's cases in its own process.
"""

import importlib
import json
import sys

# Where arthex spells each of ART's Trajectory methods, as a function of the trajectory.
ARTHEX_FUNCTIONS = {
    "chat_completions_histories": "arthex.utils.art_histories",
    "anthropic_messages_histories": "arthex.utils.anthropic_histories",
    "completions_token_histories": "arthex.utils.completions_histories",
    "completions_string_histories": "arthex.utils.completions_histories",
    "histories": "arthex.utils.trajectory_histories.trajectory_histories",
}


def histories_of(lib, trajectory, method, options):
    if lib == "art":
        return getattr(trajectory, method)(**options)
    where = ARTHEX_FUNCTIONS[method]
    if where.endswith(method):
        where, method = where.rsplit(".", 1)
    return getattr(importlib.import_module(where), method)(trajectory, **options)


def run(lib, cases):
    module = importlib.import_module(f"{lib}.trajectories")
    out = {"histories": [], "valid": [], "rejected": []}
    for case in cases["trajectories"]:
        trajectory = module.Trajectory.model_validate(case["trajectory"])
        try:
            method = case.get("method", "chat_completions_histories")
            found = histories_of(lib, trajectory, method, case.get("options", {}))
            if case.get("as_chat"):
                found = [history.as_chat_completions_history() for history in found]
        except ValueError as error:
            out["histories"].append({"error": str(error).splitlines()[0]})
        else:
            out["histories"].append([history.model_dump(mode="json") for history in found])
    for name, data in cases["valid"]:
        out["valid"].append(getattr(module, name).model_validate(data).model_dump(mode="json"))
    for name, data in cases["invalid"]:
        try:
            getattr(module, name).model_validate(data)
        except ValueError:
            out["rejected"].append(True)
        else:
            out["rejected"].append(False)
    if lib == "art":
        out["art_only"] = []
        for data, method in cases.get("other_protocols", []):
            trajectory = module.Trajectory.model_validate(data)
            out["art_only"].extend(
                [type(h).__name__, h.model_dump(mode="json")] for h in getattr(trajectory, method)()
            )
    return out


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1], json.load(sys.stdin))))
