"""Run `art.preprocessing.vllm_tokens` (ART's, or arthex's under `arthex.art`: the first
argument names the package) on the cases read as JSON from stdin, and print what each gave, as
JSON. An error of any kind reads "error" (ART raises RuntimeError, arthex InvalidInputError).

Run by ART's interpreter for ART; the interop test runs arthex's cases in its own process.
"""

import importlib
import json
import sys

from openai.types.chat import ChatCompletion
from openai.types.chat.chat_completion import Choice


def run(lib, cases):
    tokens = importlib.import_module(f"{lib}.preprocessing.vllm_tokens")
    out = {"attach": [], "metadata": [], "completion": []}
    for case in cases["attach"]:
        choice = Choice.model_validate(case["choice"])
        try:
            tokens.attach_vllm_token_metadata_to_choice(
                choice=choice, response_payload=case["payload"], choice_index=case["index"]
            )
            out["attach"].append(tokens.choice_vllm_token_metadata(choice))
        except Exception:
            out["attach"].append("error")
    for case in cases["metadata"]:
        try:
            out["metadata"].append(tokens.choice_vllm_token_metadata(Choice.model_validate(case)))
        except Exception:
            out["metadata"].append("error")
    for case in cases["completion"]:
        response = ChatCompletion.model_validate(case)
        try:
            tokens.attach_completion_token_metadata(response)
            out["completion"].append(
                [tokens.choice_completion_tokens(choice) for choice in response.choices]
            )
        except Exception:
            out["completion"].append("error")
    out["key"] = tokens.COMPLETION_TOKENS_KEY
    return out


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1], json.load(sys.stdin))))
