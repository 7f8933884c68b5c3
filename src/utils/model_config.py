"""ART's chat-template markers per model family (`art.utils.model_config`): the text that opens
a user turn and the text that opens an assistant reply, which ART's SFT masking searches for.

arthex's own SFT (`model.train_sft`, `tokenize_sft_batch`) does not need them: it takes each
trained reply's tokens from the template's own renderings (adapters/inference/sft_tokens.py),
so no marker per family is kept there. These functions answer as ART's do, for scripts that
pass `instruction_part` and `response_part` along (arthex's SFT batch takes and ignores them).
Stdlib only.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "MODEL_CONFIGS",
    "ModelConfig",
    "detect_chat_template_parts",
    "get_instruction_response_parts",
]


@dataclass
class ModelConfig:
    """The markers of one model's chat template."""

    instruction_part: str
    response_part: str


# Models whose markers the template alone does not give (ART 0.5.23's list): Qwen3 with
# thinking off renders an empty think block at the start of every reply.
MODEL_CONFIGS: dict[str, ModelConfig] = {
    "OpenPipe/Qwen3-14B-Instruct": ModelConfig(
        instruction_part="<|im_start|>user\n",
        response_part="<|im_start|>assistant\n<think>\n\n</think>\n\n",
    ),
}

# (a token only that family's templates contain, its user marker, its assistant marker), in
# ART's order of checking: the first family whose token the template holds wins.
_FAMILIES: tuple[tuple[str, str, str], ...] = (
    ("<|im_start|>", "<|im_start|>user\n", "<|im_start|>assistant\n"),  # ChatML (Qwen, ...)
    (
        "<|start_header_id|>",
        "<|start_header_id|>user<|end_header_id|>\n\n",
        "<|start_header_id|>assistant<|end_header_id|>\n\n",
    ),  # Llama 3
    ("<|turn>", "<|turn>user\n", "<|turn>model\n"),  # Gemma 4
    ("<start_of_turn>", "<start_of_turn>user\n", "<start_of_turn>model\n"),  # Gemma
    ("[INST]", "[INST]", "[/INST]"),  # Mistral
)


def detect_chat_template_parts(tokenizer: object) -> tuple[str, str]:
    """(instruction_part, response_part) read from `tokenizer.chat_template`; ValueError when
    the tokenizer has no template string or the template is of no known family."""
    template = getattr(tokenizer, "chat_template", None)
    if not template or not isinstance(template, str):
        raise ValueError(
            "Cannot detect chat template parts: tokenizer has no chat_template attribute. "
            "Please specify instruction_part and response_part manually."
        )
    for token, instruction, response in _FAMILIES:
        if token in template:
            return instruction, response
    raise ValueError(
        "Unrecognized chat template format. "
        "Please specify instruction_part and response_part manually. "
        f"Template starts with: {template[:100]!r}..."
    )


def get_instruction_response_parts(model_id: str, tokenizer: object) -> tuple[str, str]:
    """The markers of `model_id`: its entry in MODEL_CONFIGS, else the template's family."""
    config = MODEL_CONFIGS.get(model_id)
    if config is not None:
        return config.instruction_part, config.response_part
    try:
        return detect_chat_template_parts(tokenizer)
    except ValueError as error:
        raise ValueError(f"Failed to detect chat template for {model_id}: {error}") from error
