"""Run ART's `benchmark_rollout` and `suppress_litellm_serialization_warnings` (ART's, or
arthex's under `arthex.art`: the first argument names the package) on the cases read as JSON
from stdin, and print what each gave, as JSON: the mean reward and the printed line, the error
a failing rollout raises, and which warnings are still shown after suppressing LiteLLM's.

Run by ART's interpreter for ART; the interop test runs arthex's cases in its own process.
"""

import asyncio
import contextlib
import importlib
import io
import json
import sys
import warnings


def run(lib, cases):
    art = importlib.import_module(lib)
    benchmark = importlib.import_module(f"{lib}.utils.benchmark_rollout").benchmark_rollout
    suppress = importlib.import_module(
        f"{lib}.utils.suppress_litellm_serialization_warnings"
    ).suppress_litellm_serialization_warnings
    out = {"benchmarks": []}
    for model, rewards, failing in cases["benchmarks"]:

        async def rollout(name, i, is_validation, rewards=rewards, failing=failing):
            if i == failing:
                raise ValueError(f"rollout {i} failed")
            return art.Trajectory(
                messages_and_choices=[{"role": "user", "content": f"{name} {i} {is_validation}"}],
                reward=rewards[i],
            )

        printed = io.StringIO()
        try:
            with contextlib.redirect_stdout(printed):
                mean = asyncio.run(benchmark(model, len(rewards), rollout))
            out["benchmarks"].append([mean, printed.getvalue()])
        except Exception as error:
            out["benchmarks"].append([type(error).__name__, str(error)])
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        suppress()
        for message, module in cases["warnings"]:
            warnings.warn_explicit(message, UserWarning, "x.py", 1, module=module)
        warnings.warn_explicit(
            cases["warnings"][0][0], RuntimeWarning, "x.py", 1, module=cases["warnings"][0][1]
        )
    out["shown"] = [[type(w.message).__name__, str(w.message)] for w in shown]
    return out


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1], json.load(sys.stdin))))
