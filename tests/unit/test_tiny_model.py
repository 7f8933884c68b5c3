"""The tiny model factory: fast, loadable by the standard Auto classes, deterministic."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from arthex.core.errors import InvalidInputError
from arthex.testing.tiny_model import tiny_model

MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is the weather in Paris?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
]
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


def test_creation_is_idempotent(tmp_path: Path) -> None:
    # How long it takes is a benchmark's business, never a unit test's.
    path = tiny_model(tmp_path / "m")
    assert path == str(tmp_path / "m")
    before = (tmp_path / "m" / "model.safetensors").stat().st_mtime_ns
    assert tiny_model(tmp_path / "m") == path
    assert (tmp_path / "m" / "model.safetensors").stat().st_mtime_ns == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]


def test_loads_with_auto_classes_and_runs(tmp_path: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = tiny_model(tmp_path / "m")
    tokenizer: Any = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    assert 512 <= len(tokenizer) <= 1024
    assert model.config.vocab_size == len(tokenizer)
    assert None not in (tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id)
    text = "Hello! The answer is 42."
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == text
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits
    assert logits.shape == (1, len(ids), len(tokenizer))
    assert torch.isfinite(logits).all()


def test_chat_template_renders_roles_tools_and_tool_calls(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer: Any = AutoTokenizer.from_pretrained(tiny_model(tmp_path / "m"))
    text = tokenizer.apply_chat_template(
        MESSAGES, tools=TOOLS, add_generation_prompt=True, tokenize=False
    )
    assert text.startswith(tokenizer.bos_token)
    assert '"name": "get_weather", "description": "Weather for a city"' in text
    assert '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>' in text
    for role in ("system", "user", "assistant", "tool"):
        assert f"<|im_start|>{role}\n" in text
    assert text.endswith("<|im_start|>assistant\n")
    without_prompt = tokenizer.apply_chat_template(MESSAGES, tokenize=False)
    assert not without_prompt.endswith("<|im_start|>assistant\n")
    assert "# Tools" not in without_prompt
    # Content parts and mapping-shaped arguments render like their plain forms.
    parts: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": "What is the weather in Paris?"}]},
        {
            "role": "assistant",
            "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
        },
    ]
    rendered = tokenizer.apply_chat_template(parts, tokenize=False)
    assert "What is the weather in Paris?" in rendered
    assert '"arguments": {"city": "Paris"}' in rendered


def test_deterministic_for_a_seed_and_different_across_seeds(tmp_path: Path) -> None:
    first = Path(tiny_model(tmp_path / "a", seed=3))
    second = Path(tiny_model(tmp_path / "b", seed=3))
    other = Path(tiny_model(tmp_path / "c", seed=4))
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        assert (first / name).read_bytes() == (second / name).read_bytes()
    assert (first / "model.safetensors").read_bytes() != (other / "model.safetensors").read_bytes()
    assert (first / "tokenizer.json").read_bytes() == (other / "tokenizer.json").read_bytes()


def test_leaves_the_global_torch_seed_alone(tmp_path: Path) -> None:
    import torch

    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    tiny_model(tmp_path / "m")
    assert torch.equal(torch.rand(3), expected)


def test_untied_models_have_their_own_head_and_a_directory_keeps_its_kind(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    tied = AutoModelForCausalLM.from_pretrained(tiny_model(tmp_path / "tied"))
    untied = AutoModelForCausalLM.from_pretrained(tiny_model(tmp_path / "untied", tied=False))
    assert tied.lm_head.weight.data_ptr() == tied.model.embed_tokens.weight.data_ptr()
    assert untied.lm_head.weight.data_ptr() != untied.model.embed_tokens.weight.data_ptr()
    assert not untied.config.tie_word_embeddings
    with pytest.raises(InvalidInputError, match="tie_word_embeddings=False, not True"):
        tiny_model(tmp_path / "untied")
