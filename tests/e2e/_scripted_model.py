"""The tiny model, taught a script: for each given prompt it answers a given text, greedily.

A random tiny model never emits a tool call, so an agent test could not run its tool loop.
Fine-tuning it on the few exact prompts an agent will send (rendered by the model's own chat
template, as the server renders them) makes greedy decoding follow the script: the agent then
calls tools for real, through the real server, and what it sends next depends on what the
model really sampled. Training stops as soon as every prompt decodes to its answer.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from arthex.testing.tiny_model import tiny_model

Turn = tuple[list[dict[str, Any]], list[dict[str, Any]] | None, str]
"""(messages, tools, the answer the model must give after them)."""


def scripted_model(root: Path, turns: Sequence[Turn], *, max_steps: int = 600) -> str:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    digest = hashlib.sha256(json.dumps(turns, sort_keys=True).encode()).hexdigest()[:16]
    target = root / f"scripted-{digest}"
    if (target / "config.json").is_file():
        return str(target)
    base = tiny_model(root / "tiny-base")
    tokenizer: Any = AutoTokenizer.from_pretrained(base)
    model: Any = AutoModelForCausalLM.from_pretrained(base)
    examples = []
    for messages, tools, answer in turns:
        prompt = tokenizer.apply_chat_template(
            messages, tools=tools, add_generation_prompt=True, tokenize=True, return_dict=False
        )
        if prompt and isinstance(prompt[0], list):
            prompt = prompt[0]
        answer_ids = tokenizer(answer, add_special_tokens=False)["input_ids"]
        examples.append((list(prompt), [*answer_ids, tokenizer.eos_token_id]))
    threads = torch.get_num_threads()
    # One thread: a model this small gains nothing from two, and on a busy machine a second
    # thread made each step about fifteen times slower (measured: 2.9 s against 0.18 s).
    torch.set_num_threads(1)
    try:
        _teach(model, examples, max_steps)
    finally:
        torch.set_num_threads(threads)
    temp = root / f".tmp-{digest}-{os.getpid()}"
    shutil.rmtree(temp, ignore_errors=True)
    model.save_pretrained(str(temp))
    tokenizer.save_pretrained(str(temp))
    os.replace(temp, target)
    return str(target)


def _teach(model: Any, examples: list[tuple[list[int], list[int]]], max_steps: int) -> None:
    import torch

    torch.manual_seed(0)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    for step in range(max_steps):
        optimizer.zero_grad()
        total = torch.zeros(())
        for prompt_ids, answer_tokens in examples:
            ids = torch.tensor([prompt_ids + answer_tokens])
            logits = model(ids).logits[0, len(prompt_ids) - 1 : -1]
            total = total + torch.nn.functional.cross_entropy(logits, torch.tensor(answer_tokens))
        total.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
        if step % 10 == 9 and _follows(model, examples):
            break
    else:
        raise AssertionError(f"the tiny model did not learn the script in {max_steps} steps")
    model.eval()


def _follows(model: Any, examples: list[tuple[list[int], list[int]]]) -> bool:
    import torch

    model.eval()
    try:
        with torch.no_grad():
            for prompt, answer in examples:
                ids = prompt + answer
                logits = model(torch.tensor([ids])).logits[0, len(prompt) - 1 : -1]
                if logits.argmax(dim=-1).tolist() != answer:
                    return False
        return True
    finally:
        model.train()
