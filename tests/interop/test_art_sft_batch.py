"""`arthex.art.preprocessing.tokenize.tokenize_sft_batch` gives what ART 0.5.23's gives: the
same conversations, on the tiny model's tokenizer and chat template, go through ART's function
in ART's venv (art/sft_batch_script.py, one run for every call) and through arthex's here, with
every assistant turn trained and with the last only, with and without a length limit, and each
batch must agree in its input ids, attention masks, labels, learning rate and counts.

ART finds assistant turns by the markers it is given (`<|im_start|>user`, `<|im_start|>assistant\n`
here); arthex takes the targets from the template's own renderings: on these conversations, of
user and assistant turns, the two agree token for token.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from arthex.testing.tiny_model import tiny_model

from .art_env import SCRIPTS, art_environment, art_python

STAND_INS = {
    "torch/__init__.py": (
        "class Tensor:\n    pass\n\n\nlong = 'long'\n\n\n"
        "def tensor(data, dtype=None):\n    return data\n"
    ),
    "transformers/__init__.py": "",
    "transformers/tokenization_utils_base.py": (
        "class BatchEncoding(dict):\n    pass\n\n\nclass PreTrainedTokenizerBase:\n    pass\n"
    ),
}
INSTRUCTION, RESPONSE = "<|im_start|>user", "<|im_start|>assistant\n"

CONVERSATIONS: list[list[dict[str, Any]]] = [
    [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is two plus two?"},
        {"role": "assistant", "content": "Two plus two is four."},
    ],
    [
        {"role": "user", "content": "Hello!"},
        {"role": "assistant", "content": "How can I help you today?"},
        {"role": "user", "content": "Count from one to ten."},
        {"role": "assistant", "content": "one two three four five six seven eight nine ten"},
    ],
    [
        {"role": "user", "content": "yes or no?"},
        {"role": "assistant", "content": "yes"},
    ],
]
CALLS: list[dict[str, Any]] = [
    {"learning_rate": 1e-4, "max_seq_length": None, "assistant_turns": "all"},
    {"learning_rate": 2e-5, "max_seq_length": None, "assistant_turns": "last"},
    {"learning_rate": 3e-5, "max_seq_length": 40, "assistant_turns": "all"},  # drops the long one
]


def ours(batch: Any) -> dict[str, Any]:
    return {
        "input_ids": [t["input_ids"].tolist() for t in batch.trajectory_tensors],
        "attention_mask": [t["attention_mask"].tolist() for t in batch.trajectory_tensors],
        "labels": [t["labels"].tolist() for t in batch.trajectory_tensors],
        "learning_rate": batch.learning_rate,
        "num_trajectories": batch.num_trajectories,
        "num_tokens": batch.num_tokens,
        "num_trainable_tokens": batch.num_trainable_tokens,
        "num_dropped_trajectories": batch.num_dropped_trajectories,
    }


def test_tokenize_sft_batch_gives_arts_batches(tmp_path: Path) -> None:
    import sys

    from arthex.art.preprocessing.tokenize import tokenize_sft_batch
    from arthex.art.tokenizer import get_tokenizer
    from arthex.art.trajectories import Trajectory

    model = tiny_model(tmp_path / "model")
    tokenizer = get_tokenizer(model)
    sys.path.insert(0, str(SCRIPTS))
    try:
        from sft_batch_script import TemplateTokenizer  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(SCRIPTS))
    stand_in = TemplateTokenizer(model)
    for messages in CONVERSATIONS:  # ART's tokenizer stand-in is the model's tokenizer
        for cut, prompt in ((len(messages), False), (len(messages) - 1, True)):
            expected = tokenizer.apply_chat_template(
                messages[:cut], add_generation_prompt=prompt, tokenize=True, return_dict=False
            )
            assert stand_in.apply_chat_template(messages[:cut], add_generation_prompt=prompt) == (
                list(expected)
            )
    for name, text in STAND_INS.items():
        (tmp_path / "imports" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "imports" / name).write_text(text)
    task = tmp_path / "task.json"
    task.write_text(json.dumps({
        "model": model, "calls": [{**c, "conversations": CONVERSATIONS} for c in CALLS],
        "instruction_part": INSTRUCTION, "response_part": RESPONSE,
    }))  # fmt: skip
    env = art_environment()
    env["PYTHONPATH"] = str(tmp_path / "imports")
    out = tmp_path / "art.json"
    done = subprocess.run(
        [str(art_python()), str(SCRIPTS / "sft_batch_script.py"), str(task), str(out)],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    art = json.loads(out.read_text())
    trajectories = [Trajectory(messages_and_choices=m) for m in CONVERSATIONS]
    with pytest.warns(UserWarning, match="dropped 1/3"):
        arthex = [
            ours(tokenize_sft_batch(trajectories, c["learning_rate"], tokenizer, INSTRUCTION,
                                    RESPONSE, max_seq_length=c["max_seq_length"],
                                    assistant_turns=c["assistant_turns"]))
            for c in CALLS
        ]  # fmt: skip
    assert arthex == art
    assert art[2]["num_dropped_trajectories"] == 1 and art[2]["num_trajectories"] == 2
    two_turns = art[0]["labels"][1][0]
    assert art[1]["labels"][1][0] != two_turns  # "last" leaves the first reply untrained
