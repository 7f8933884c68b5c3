"""Run ART's old benchmarks (`art.utils.old_benchmarking`; ART's, or arthex's under
`arthex.art`: the first argument names the package) on the project folder named in the JSON
read from stdin, and print what they give as JSON: each key's benchmarked steps, the
comparison table, what each line graph draws (recorded as matplotlib saves the figure), the
image grid's HTML and the errors bad input gives (the exception's type and message).

Run by the ART plotting venv's interpreter for ART, in a scratch working directory (the line
graphs go to `.art/{project}/benchmarks` there); the interop test runs arthex's in its own
process, in another scratch directory.
"""

import importlib
import json
import math
import sys
from datetime import datetime


def _time(value):
    return value.isoformat() if isinstance(value, datetime) else value


def _number(value):
    return None if isinstance(value, float) and math.isnan(value) else float(value)


def _models(models):
    return [
        {
            "key": [m.model_key.model, m.model_key.split, m.model_key.step_indices,
                    str(m.model_key)],
            "steps": [
                {"index": s.index, "recorded_at": _time(s.recorded_at),
                 "metrics": {k: float(v) for k, v in s.metrics.items()}}
                for s in m.steps
            ],
        }
        for m in models
    ]  # fmt: skip


def _outcome(call):
    try:
        return {"value": call()}
    except Exception as error:
        return {"error": type(error).__name__, "message": str(error)}


def _recording_figures():
    """Patch matplotlib's Figure.savefig to note what each saved figure draws."""
    from matplotlib.colors import to_hex
    from matplotlib.figure import Figure

    drawn = []
    save = Figure.savefig

    def recording(self, *args, **kwargs):
        for ax in self.axes:
            drawn.append({
                "title": ax.get_title(),
                "xlabel": ax.get_xlabel(),
                "ylabel": ax.get_ylabel(),
                "lines": [
                    {"label": line.get_label(), "color": to_hex(line.get_color()),
                     "linestyle": line.get_linestyle(),
                     "x": [_number(x) for x in line.get_xdata()],
                     "y": [_number(y) for y in line.get_ydata()]}
                    for line in ax.get_lines()
                ],
                "dots": [[_number(v) for v in point] for c in ax.collections
                         for point in c.get_offsets()],
                "texts": [[_number(t.get_position()[0]), _number(t.get_position()[1]),
                           t.get_text()] for t in ax.texts],
                "legend": [t.get_text() for t in ax.get_legend().get_texts()]
                if ax.get_legend() else [],
            })  # fmt: skip
        return save(self, *args, **kwargs)

    Figure.savefig = recording
    return drawn


def run(lib, cases):
    import os

    drawn = _recording_figures()
    captured = []
    import IPython.display

    IPython.display.display = captured.append  # the grid's HTML object, not a notebook
    mod = {
        name: importlib.import_module(f"{lib}.utils.old_benchmarking.{name}")
        for name in ("types", "load_benchmarked_models", "generate_comparison_table",
                     "generate_line_graphs", "display_image_grid", "calculate_step_metrics")
    }  # fmt: skip
    Key = mod["types"].BenchmarkedModelKey
    load = mod["load_benchmarked_models"].load_benchmarked_models
    project, api_path = cases["project"], cases["api_path"]

    def keys(given):
        return [Key(*key) for key in given]

    out = {}
    for name, given in cases["loads"].items():
        out[f"load {name}"] = _outcome(
            lambda given=given: _models(load(project, keys(given), cases["metrics"], api_path))
        )
    for name, (given, project_name) in cases["bad"].items():
        out[f"bad {name}"] = _outcome(
            lambda given=given, p=project_name: _models(load(p, keys(given), ["reward"], api_path))
        )
    table = mod["generate_comparison_table"].generate_comparison_table(
        project, keys(cases["table"]), cases["metrics"], api_path
    )
    out["table"] = {
        "columns": [str(c) for c in table.columns],
        "rows": [[str(v) for v in row] for row in
                 (table.to_numpy().tolist() if hasattr(table, "to_numpy") else table.rows())],
    }  # fmt: skip
    graphs = mod["generate_line_graphs"].generate_line_graphs
    paths = graphs(project, keys(cases["lines"]), keys(cases["references"]),
                   cases["metrics"], "step", api_path)  # fmt: skip
    out["graph files"] = []
    for path in paths:
        with open(path, "rb") as file:
            out["graph files"].append([os.path.relpath(path), file.read(8).hex()])
    out["graphs"] = list(drawn)
    del drawn[:]
    out["time graphs"] = _outcome(
        lambda: len(graphs(project, keys(cases["lines"]), [], ["reward"], "time", api_path))
    )
    out["time drawn"] = list(drawn)
    mod["display_image_grid"].display_image_grid(cases["images"], 3)
    out["grid"] = [getattr(h, "data", h) for h in captured]
    return out


if __name__ == "__main__":
    import contextlib

    with contextlib.redirect_stdout(sys.stderr):  # what the libraries print
        result = run(sys.argv[1], json.load(sys.stdin))
    print(json.dumps(result))
