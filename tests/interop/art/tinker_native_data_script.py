"""Run ART's `tinker_native.data` renderer path (ART's, or arthex's under `arthex.art`: the first
argument names the package) with tinker-cookbook's renderers on the cases read as JSON from
stdin, and print what each function gave, as JSON: messages as dicts (the cookbook's ToolCalls
dumped), Datums as their token ids and loss inputs, an exception as its type's name.

Both runs happen in the venv that has ART, tinker and tinker-cookbook (arthex on PYTHONPATH for
its own run): the renderers and tokenizer are the same objects' kinds on both sides.
"""

import importlib
import json
import sys

from openai.types.chat.chat_completion import Choice
from tinker_cookbook import renderers
from transformers import AutoTokenizer


def plain(value):
    if hasattr(value, "model_dump"):
        return plain(value.model_dump(mode="json"))
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return value


def outcome(function, *args):
    try:
        return {"ok": plain(function(*args))}
    except Exception as error:  # the type is the outcome compared
        return {"error": type(error).__name__}


def datum_fields(datum):
    if datum is None:
        return None
    inputs = datum.loss_fn_inputs
    return {
        "input": datum.model_input.to_ints(),
        **{
            key: [round(float(v), 5) for v in inputs[key].tolist()]
            for key in ("target_tokens", "logprobs", "advantages")
        },
    }


def items(raw):
    return [Choice.model_validate(item["choice"]) if "choice" in item else item for item in raw]


def run(lib, cases):
    data = importlib.import_module(f"{lib}.tinker_native.data")
    trajectories = importlib.import_module(f"{lib}.trajectories")
    tokenizer = AutoTokenizer.from_pretrained(cases["tokenizer"])
    made = {name: renderers.get_renderer(name, tokenizer) for name in cases["renderers"]}
    result = {"last": [], "logprobs": [], "convert": [], "prefix": [], "parse": [], "datum": []}
    for raw in cases["conversations"]:
        found = data.find_last_choice(items(raw))
        result["last"].append(None if found is None else [found[0], plain(found[1])])
    for raw in cases["choices"]:
        choice = Choice.model_validate(raw)
        result["logprobs"].append(outcome(data.extract_logprobs_from_choice, choice, tokenizer))
    for renderer in made.values():
        for case in cases["convert"]:
            messages = [dict(m) for m in case["messages"]]
            convert = data.convert_openai_messages_to_renderer_format
            result["convert"].append(outcome(convert, messages, case["tools"], renderer))
        for case in cases["prefix"]:
            prefix = data.create_conversation_prefix_with_tools
            result["prefix"].append(outcome(prefix, renderer, case["tools"], *case["system"]))
        for text in cases["completions"]:
            tokens = tokenizer.encode(text, add_special_tokens=False)
            parse = data.parse_completion_to_openai_message
            result["parse"].append(outcome(parse, tokens, renderer))
        for case in cases["histories"]:
            history = trajectories.LegacyHistory(
                messages_and_choices=items(case["messages_and_choices"]), tools=case["tools"]
            )
            args = (history, case["advantage"], renderer, tokenizer)
            result["datum"].append(
                outcome(lambda *a: datum_fields(data.history_to_datum(*a)), *args)
            )
    return result


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1], json.load(sys.stdin))))
