"""Run the pure parts of ART's two pipeline examples (ART's, or arthex's under `arthex.art`: the
first argument names the package) on the cases read as JSON from stdin, and print what each
gave, as JSON: the yes/no/maybe constants, scenarios and rewards; the binary-prefix constants,
guess checks, prefix lengths, guesses read from tool calls (as openai objects and as dicts),
the run folder and the history summary.

ART's example modules import its Tinker backend (tinker, torch, fastapi), which the functions
compared never touch and the interop venv does not install: a stand-in module takes its
place while ART's module is imported, and only for that.

Run by ART's interpreter for ART; the interop test runs arthex's cases in its own process.
"""

import contextlib
import importlib
import io
import json
import sys
import types

from openai.types.chat.chat_completion import Choice


def load(lib, name):
    path = f"{lib}.pipeline_trainer.{name}"
    if lib != "art" or "art.tinker_native" in sys.modules:
        return importlib.import_module(path)
    stand_in = types.ModuleType("art.tinker_native")
    stand_in.TinkerNativeBackend = None
    sys.modules["art.tinker_native"] = stand_in
    try:
        return importlib.import_module(path)
    finally:
        del sys.modules["art.tinker_native"]


def model(lib, base_path, project, name):
    if lib == "art":  # ART's helpers read these three attributes of a TrainableModel
        return types.SimpleNamespace(base_path=base_path, project=project, run_name=name)
    arthex = importlib.import_module("arthex")
    return arthex.Model(name=name, project=project, base_path=base_path, report_metrics=[])


def choice(case):
    message = {"role": "assistant", "content": None, "tool_calls": case["tool_calls"] or None}
    if case["form"] == "openai":
        return Choice.model_validate({"index": 0, "finish_reason": "stop", "message": message})
    return types.SimpleNamespace(message=types.SimpleNamespace(tool_calls=case["tool_calls"]))


def summary(module, run, tail):
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            module.print_history_summary(run, tail=tail)
    except KeyError as error:
        return {"error": f"KeyError: {error}"}
    return {"printed": out.getvalue()}


def run(lib, cases):
    yes = load(lib, "yes_no_maybe_pipeline")
    bits = load(lib, "binary_prefix_tool_pipeline")
    config = bits.PipelineConfig(0.7, 0.1, 123)
    out = {
        "yes_constants": [getattr(yes, name) for name in cases["yes_constants"]],
        "scenarios": yes.build_scenarios(),
        "rewards": [yes.reward_for_answer(text) for text in cases["answers"]],
        "bits_constants": [getattr(bits, name) for name in cases["bits_constants"]],
        "config": [config.temperature, config.eval_temperature, config.max_tokens],
        "valid": [bits.is_valid_guess(guess) for guess in cases["guesses"]],
        "prefix": [bits.shared_prefix_len(g, s) for g, s in cases["prefix_pairs"]],
        "extracted": [list(bits.extract_guess(choice(case))) for case in cases["choices"]],
        "output_dir": [],
        "summaries": [],
    }
    for base_path, project, name in cases["runs"]:
        out["output_dir"].append(
            str(bits.get_model_output_dir(model(lib, base_path, project, name)))
        )
    for base_path, project, name, tail in cases["summaries"]:
        out["summaries"].append(summary(bits, model(lib, base_path, project, name), tail))
    return out


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1], json.load(sys.stdin))))
