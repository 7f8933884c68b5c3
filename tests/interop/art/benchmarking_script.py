"""Run ART's benchmarking loaders (ART's, or arthex's under `arthex.art`: the first argument
names the package) on the project folder read as JSON from stdin, and print the frames they
give as JSON rows (datetimes as ISO text).

Run by ART's interpreter for ART, in a scratch working directory (ART's loader makes a
`data/` folder there as it is imported); the interop test runs arthex's in its own process.
"""

import asyncio
import importlib
import json
import sys


def _rows(frame):
    return json.loads(json.dumps(frame.to_dicts(), default=str))


def run(lib, cases):
    loading = importlib.import_module(f"{lib}.utils.benchmarking.load_trajectories")
    aggregate = importlib.import_module(f"{lib}.utils.benchmarking.aggregate_trajectories")
    filtering = importlib.import_module(f"{lib}.utils.benchmarking.filter_model_split")
    types = importlib.import_module(f"{lib}.utils.benchmarking.types")
    project, art_path = cases["project"], cases["art_path"]
    frame = asyncio.run(loading.load_trajectories(project, art_path=art_path))
    keys = [types.BenchmarkModelKey(*key) for key in cases["keys"]]
    return {
        "rows": _rows(frame),
        "columns": sorted(frame.columns),
        "one_model": _rows(
            asyncio.run(
                loading.load_trajectories(project, models=[cases["models"][0]], art_path=art_path)
            )
        ),
        "missing": _rows(asyncio.run(loading.load_trajectories("nothing", art_path=art_path))),
        "filtered": _rows(filtering.filter_rename_model_split(frame, keys)),
        "keys": [[k.name, k.display_name, k.split, str(k)] for k in keys],
        "steps": _rows(
            asyncio.run(
                aggregate.load_aggregated_trajectories(
                    project, art_path=art_path, include_history=True
                )
            )
        ),
        "reward_only": _rows(
            asyncio.run(
                aggregate.load_aggregated_trajectories(
                    project, metrics=["reward"], art_path=art_path
                )
            )
        ),
        "latest": _rows(asyncio.run(aggregate.load_latest_metrics(project, art_path=art_path))),
        "latest_train": _rows(
            asyncio.run(aggregate.load_latest_metrics(project, split="train", art_path=art_path))
        ),
    }


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1], json.load(sys.stdin))))
