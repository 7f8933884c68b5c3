"""Run as a script in a clean interpreter (`python -I load_export.py FOLDER MESSAGES_JSON`):
refuses to import arthex, loads the exported model with plain transformers and prints the
greedy reply to MESSAGES_JSON, rendered by the export's own chat template, as JSON. What it
shows: an export stands on its own."""

from __future__ import annotations

import importlib.abc
import json
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType


class NoArthex(importlib.abc.MetaPathFinder):
    """Refuses every import of arthex."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname == "arthex" or fullname.startswith("arthex."):
            raise ImportError("the exported model must load without arthex")
        return None


def greedy_reply(folder: str, messages: list[dict[str, str]]) -> str:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    prompt = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    with torch.no_grad():
        out = model.generate(
            torch.tensor([prompt]),
            max_new_tokens=16,
            do_sample=False,
            pad_token_id=tokenizer.pad_token_id,
        )
    return str(tokenizer.decode(out[0, len(prompt) :], skip_special_tokens=True))


if __name__ == "__main__":
    sys.meta_path.insert(0, NoArthex())
    print(json.dumps(greedy_reply(sys.argv[1], json.loads(sys.argv[2]))))
