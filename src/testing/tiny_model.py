"""A tiny random-weight chat model made on the spot, so tests and the demo never download one.

The model is a small Llama-style causal LM and the tokenizer a byte-level BPE trained locally
on a short built-in corpus, saved in the standard Hugging Face layout with a chat template that
renders roles, tool calls and tool specs. Everything is deterministic for a seed, so two
machines that build it get the same bytes and tests can compare numbers across runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
from pathlib import Path
from typing import Any

from ..adapters.hf_quiet import quiet_hf
from ..core.errors import InvalidInputError, MissingExtraError

__all__ = ["CHAT_TEMPLATE", "tiny_model"]

BOS = "<|bos|>"
EOS = "<|eos|>"
PAD = "<|pad|>"
TURN = "<|im_start|>"
VOCAB_SIZE = 768

# Messages may carry OpenAI content parts, OpenAI-shaped tool calls (arguments as a JSON string)
# or Hugging Face-shaped ones (arguments as a mapping); the template accepts both.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% if tools %}"
    "<|im_start|>system\n# Tools\n"
    "{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}"
    "{{ eos_token }}\n"
    "{% endif %}"
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message.get('content') is string %}{{ message['content'] }}"
    "{% elif message.get('content') %}"
    "{% for part in message['content'] %}"
    "{% if part.get('type') == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}"
    "{% endif %}"
    "{% for call in message.get('tool_calls') or [] %}"
    "{% set fn = call['function'] if call.get('function') else call %}"
    '<tool_call>{"name": {{ fn[\'name\'] | tojson }}, "arguments": '
    "{% if fn['arguments'] is string %}{{ fn['arguments'] }}"
    "{% else %}{{ fn['arguments'] | tojson }}{% endif %}}</tool_call>"
    "{% endfor %}"
    "{{ eos_token }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

_CORPUS = (
    "The quick brown fox jumps over the lazy dog. ",
    "Hello! How can I help you today? ",
    "You are a helpful assistant. Answer the question briefly. ",
    "What is two plus two? Two plus two is four. ",
    "Count from one to ten: one two three four five six seven eight nine ten. ",
    "0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 42 100 1000 ",
    "yes no maybe true false none null ok done error ",
    "The weather today is sunny with a light breeze and a high of 21 degrees. ",
    "Please call the tool get_weather with the city name as an argument. ",
    '{"name": "get_weather", "arguments": {"city": "Paris"}} ',
    '{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}} ',
    "def add(a, b):\n    return a + b\n\nprint(add(2, 3))\n",
    "system user assistant tool tool_call function arguments content role ",
    "Guess the secret number. Is it higher or lower? It is higher. It is lower. Correct! ",
    "Think step by step, then give the final answer. The answer is: ",
    "A B C D E F G H I J K L M N O P Q R S T U V W X Y Z a b c d e f g h i j k l m ",
    "n o p q r s t u v w x y z . , ; : ! ? ' \" ( ) [ ] { } < > / \\ | - _ + = * & ^ % $ # @ ~ ",
)


# (hidden, intermediate, layers, heads, kv heads) per size: "tiny" for tests and the demo,
# the larger ones for benchmarks, where a step should cost real arithmetic, not only Python.
SIZES: dict[str, tuple[int, int, int, int, int]] = {
    "tiny": (64, 128, 2, 4, 2),
    "3M": (256, 688, 4, 4, 2),
    "20M": (512, 1536, 8, 8, 4),
}


def tiny_model(
    directory: str | os.PathLike[str], *, seed: int = 0, size: str = "tiny", tied: bool = True
) -> str:
    """Write the tiny model into `directory` unless it is already there; return the path.

    `size` picks a wider, deeper random Llama with the same tokenizer ("3M", "20M" params).
    `tied` shares the input embeddings with the output head (as small chat models do); False
    gives the head its own weights (as large ones do). A directory that already holds the
    other kind is an error, not silently reused.

    Creation takes a second or two on a CPU. It is written into a sibling temp folder and
    renamed into place, so a reader never sees half a model and two racing creators are fine.
    """
    if size not in SIZES:
        raise InvalidInputError(f"size must be one of {sorted(SIZES)}, got {size!r}")
    target = Path(directory)
    if _is_complete(target):
        return _checked_tying(target, tied)
    try:
        import tokenizers  # noqa: F401
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        raise MissingExtraError("torch", "local") from exc

    target.parent.mkdir(parents=True, exist_ok=True)
    temp = target.with_name(f".tmp-{target.name}.{os.getpid()}.{secrets.token_hex(4)}")
    try:
        temp.mkdir()
        tokenizer = _build_tokenizer()
        quiet_hf()
        tokenizer.save_pretrained(str(temp))
        _build_model(len(tokenizer), tokenizer, seed, size, tied).save_pretrained(str(temp))
        if target.exists() and not any(target.iterdir()):
            target.rmdir()
        with contextlib.suppress(FileExistsError, OSError):
            os.replace(temp, target)
        if not _is_complete(target):
            raise FileExistsError(
                f"{target} exists but does not hold a complete model; remove it or pick "
                "another directory"
            )
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    return _checked_tying(target, tied)


def _is_complete(directory: Path) -> bool:
    return (directory / "config.json").is_file() and (directory / "tokenizer.json").is_file()


def _checked_tying(directory: Path, tied: bool) -> str:
    config = json.loads((directory / "config.json").read_text())
    if bool(config.get("tie_word_embeddings", True)) != tied:
        raise InvalidInputError(
            f"{directory} holds a tiny model with tie_word_embeddings="
            f"{not tied}, not {tied}; use another directory for each kind"
        )
    return str(directory)


def _build_tokenizer() -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=1,
        special_tokens=[PAD, BOS, EOS, TURN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(list(_CORPUS) * 4, trainer=trainer)
    tokenizer: Any = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=core,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        additional_special_tokens=[TURN],
        padding_side="left",
        clean_up_tokenization_spaces=False,
        model_max_length=1024,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def _build_model(
    vocab_size: int, tokenizer: Any, seed: int, size: str = "tiny", tied: bool = True
) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    hidden, intermediate, layers, heads, kv_heads = SIZES[size]
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=1024,
        tie_word_embeddings=tied,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    # A forked RNG keeps the caller's global torch seed untouched.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model: Any = LlamaForCausalLM(config)
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model.eval()
