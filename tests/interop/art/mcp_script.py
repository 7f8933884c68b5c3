"""Run ART's MCP scenario utilities (ART's, or arthex's under `arthex.art`: the first argument
names the package) on the cases read as JSON from stdin and print what each gave, as JSON:
the types' dict forms, a collection's JSON forms, split, filter, distribution and summary,
the refusals, and `generate_scenarios` against the scripted generator at `base_url`.

Run by ART's interpreter for ART; the interop test runs arthex's cases in its own process.
"""

import asyncio
import contextlib
import importlib
import io
import json
import sys


def _outcome(call):
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # the previews both print
            value = call()
    except ValueError:
        return "ValueError"
    return value


def run(lib, cases):
    mcp = importlib.import_module(f"{lib}.mcp")
    collection_type = mcp.GeneratedScenarioCollection
    out = {
        "tools": [mcp.MCPTool.from_dict(t).to_tool_schema() for t in cases["tools"]],
        "resources": [mcp.MCPResource.from_dict(r).to_dict() for r in cases["resources"]],
        "complete_task": mcp.complete_task_tool.to_tool_schema(),
        "scenarios": [
            _outcome(lambda s=s: mcp.GeneratedScenario.from_dict(s).to_dict())
            for s in cases["scenarios"]
        ],
        "previews": [
            mcp.GeneratedScenario(task=t, difficulty=2).preview(10) for t in cases["tasks"]
        ],
        "from_json": [
            _outcome(lambda j=j: collection_type.from_json(j).to_dicts()) for j in cases["json"]
        ],
    }
    collection = collection_type.from_dicts(cases["collection"])
    train, val = collection.split(cases["train_size"])
    out["collection"] = {
        "json": json.loads(collection.to_json(indent=2)),
        "split": [train.to_dicts(), val.to_dicts()],
        "too_big": _outcome(lambda: collection.split(len(collection) + 1)),
        "filtered": collection.filter_by_difficulty(2, 4).to_dicts(),
        "distribution": sorted(collection.get_difficulty_distribution().items()),
        "summary": collection.get_summary(),
        "empty_summary": collection_type([]).get_summary(),
        "items": [collection[0].to_dict(), len(collection), [s.task for s in collection]],
        "shuffled": sorted(s.task for s in collection.shuffle()),
    }
    generated = []
    for count in cases["counts"]:
        call = mcp.generate_scenarios(
            cases["tools"],
            cases["resources"],
            num_scenarios=count,
            show_preview=True,
            generator_model="scripted",
            generator_api_key="k",
            generator_base_url=cases["base_url"],
        )
        result = _outcome(lambda call=call: asyncio.run(call))
        generated.append(result if isinstance(result, str) else result.to_dicts())
    out["generated"] = generated
    return out


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1], json.load(sys.stdin))))
