"""ART's chat-template markers (`arthex.art.utils.model_config`) on worked examples: the
markers found for a template are where its renderings open a user turn and an assistant reply
(ART's own answers are compared in tests/interop/test_art_templates_and_caches.py)."""

from __future__ import annotations

from types import SimpleNamespace

import jinja2
import pytest

from arthex.art.utils.model_config import (
    MODEL_CONFIGS,
    ModelConfig,
    detect_chat_template_parts,
    get_instruction_response_parts,
)
from arthex.testing.tiny_model import CHAT_TEMPLATE

LLAMA3 = (
    "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>"
    "\n\n{{ m['content'] }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
GEMMA = (
    "{% for m in messages %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' else "
    "m['role'] }}\n{{ m['content'] }}<end_of_turn>\n{% endfor %}"
)


def render(template: str) -> str:
    messages = [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]
    return str(
        jinja2.Template(template).render(
            messages=messages, bos_token="<s>", eos_token="</s>", add_generation_prompt=False
        )
    )


@pytest.mark.parametrize(
    "template", [CHAT_TEMPLATE, LLAMA3, GEMMA], ids=["chatml", "llama3", "gemma"]
)
def test_the_markers_open_the_user_turn_and_the_reply_in_a_rendering(template: str) -> None:
    instruction, response = detect_chat_template_parts(SimpleNamespace(chat_template=template))
    text = render(template)
    assert text.index(instruction + "2+2?") < text.index(response + "4")


def test_each_family_is_told_by_its_own_token() -> None:
    def parts(template: str) -> tuple[str, str]:
        return detect_chat_template_parts(SimpleNamespace(chat_template=template))

    assert parts("<|turn>x") == ("<|turn>user\n", "<|turn>model\n")  # Gemma 4
    assert parts("[INST] {{ m }} [/INST]") == ("[INST]", "[/INST]")  # Mistral
    assert parts("[INST] <|im_start|>")[0] == "<|im_start|>user\n"  # ChatML is checked first


def test_a_listed_model_wins_over_its_template() -> None:
    chatml = SimpleNamespace(chat_template=CHAT_TEMPLATE)
    qwen3 = get_instruction_response_parts("OpenPipe/Qwen3-14B-Instruct", chatml)
    assert qwen3 == ("<|im_start|>user\n", "<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert get_instruction_response_parts("other/model", chatml)[1] == "<|im_start|>assistant\n"
    assert MODEL_CONFIGS["OpenPipe/Qwen3-14B-Instruct"] == ModelConfig(*qwen3)


def test_no_template_or_an_unknown_one_is_a_value_error_naming_the_model() -> None:
    with pytest.raises(ValueError, match="no chat_template attribute"):
        detect_chat_template_parts(object())
    with pytest.raises(ValueError, match="no chat_template"):
        detect_chat_template_parts(SimpleNamespace(chat_template=["not", "a", "string"]))
    with pytest.raises(
        ValueError, match=r"Failed to detect chat template for m/x: .*starts with: '### "
    ):
        get_instruction_response_parts("m/x", SimpleNamespace(chat_template="### {{ m }}"))
