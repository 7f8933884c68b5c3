"""Run ART's `tinker.renderers` (ART's, or arthex's under `arthex.art`: the first argument names
the package) on the base-model names read as JSON from stdin, and print, as JSON, what
`get_renderer_name` gave for each (its renderer, or "ValueError" when it raised one),
what `is_qwen3_dot_family_model` gave, and whether `tinker.get_renderer_name` is the same
function. ART prints its defaults to stdout; that text is kept out of the JSON.

Run by ART's interpreter for ART; the interop test runs arthex's cases in its own process.
"""

import contextlib
import importlib
import io
import json
import sys


def run(lib, cases):
    renderers = importlib.import_module(f"{lib}.tinker.renderers")
    package = importlib.import_module(f"{lib}.tinker")
    names = []
    for base_model in cases["base_models"]:
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                names.append(renderers.get_renderer_name(base_model))
        except ValueError:
            names.append("ValueError")
    return {
        "names": names,
        "qwen3_dot": [renderers.is_qwen3_dot_family_model(m) for m in cases["base_models"]],
        "same": package.get_renderer_name is renderers.get_renderer_name,
    }


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1], json.load(sys.stdin))))
