"""Runs ART 0.5.23's `art.preprocessing.tokenize.tokenize_sft_batch` on conversations written
by the interop test (`python sft_batch_script.py TASK OUT`) and writes each batch's input ids,
labels and counts, as JSON, to OUT.

ART's venv has neither torch nor transformers. The test puts stand-ins for the two on
PYTHONPATH: `torch.tensor` hands back the nested list it was given (so a batch's tensors read
as lists) and transformers carries only the names ART imports. The tokenizer is
`TemplateTokenizer` below: the model folder's tokenizer.json (the tokenizers library) and its
chat_template.jinja rendered the way Hugging Face renders a chat template; the test checks, in
its own process, that it renders and encodes every conversation exactly as the model's
Hugging Face tokenizer does.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


class Encoded:
    def __init__(self, ids: list[int]) -> None:
        self.input_ids = ids


class TemplateTokenizer:
    """A model folder's tokenizer, with Hugging Face's chat-template rendering."""

    def __init__(self, folder: str) -> None:
        from tokenizers import Tokenizer

        self._tokenizer = Tokenizer.from_file(str(Path(folder, "tokenizer.json")))
        config = json.loads(Path(folder, "tokenizer_config.json").read_text())
        self.chat_template = Path(folder, "chat_template.jinja").read_text()
        self._special = {k: config[k] for k in ("bos_token", "eos_token", "pad_token")}

    def __call__(self, text: str, add_special_tokens: bool = False) -> Encoded:
        return Encoded(self._tokenizer.encode(text, add_special_tokens=add_special_tokens).ids)

    def apply_chat_template(
        self,
        messages: list[dict[str, Any]],
        tools: Any = None,
        tokenize: bool = True,
        add_generation_prompt: bool = False,
        **kwargs: Any,
    ) -> Any:
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.filters["tojson"] = lambda value, indent=None, separators=None, sort_keys=False: (
            json.dumps(value, ensure_ascii=False, indent=indent, separators=separators,
                       sort_keys=sort_keys)
        )  # fmt: skip
        text = env.from_string(self.chat_template).render(
            messages=messages,
            tools=tools,
            add_generation_prompt=add_generation_prompt,
            **self._special,
            **kwargs,
        )
        return self(text).input_ids if tokenize else text


def main() -> None:
    from art.preprocessing.tokenize import tokenize_sft_batch
    from art.trajectories import Trajectory

    task = json.loads(Path(sys.argv[1]).read_text())
    tokenizer = TemplateTokenizer(task["model"])
    out = []
    for call in task["calls"]:
        batch = tokenize_sft_batch(
            [Trajectory(messages_and_choices=m) for m in call["conversations"]],
            call["learning_rate"],
            tokenizer,
            task["instruction_part"],
            task["response_part"],
            max_seq_length=call["max_seq_length"],
            assistant_turns=call["assistant_turns"],
        )
        out.append(
            {
                "input_ids": [t["input_ids"] for t in batch.trajectory_tensors],
                "attention_mask": [t["attention_mask"] for t in batch.trajectory_tensors],
                "labels": [t["labels"] for t in batch.trajectory_tensors],
                "learning_rate": batch.learning_rate,
                "num_trajectories": batch.num_trajectories,
                "num_tokens": batch.num_tokens,
                "num_trainable_tokens": batch.num_trainable_tokens,
                "num_dropped_trajectories": batch.num_dropped_trajectories,
            }
        )
    Path(sys.argv[2]).write_text(json.dumps(out))


if __name__ == "__main__":
    main()
