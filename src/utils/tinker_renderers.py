"""Which tinker-cookbook renderer suits a base model, by the model's Hugging Face name.

Tinker's cookbook renders chats with named renderers (`tinker_cookbook.renderers.get_renderer`);
recipes store that name with their training runs, and a script that builds its own renderer
needs one for its base model. `get_renderer_name` picks it from the name's family:

    meta-llama/...                    -> "llama3"
    Qwen/Qwen3.x...                   -> "qwen3_5_disable_thinking"
    Qwen/Qwen3-...Instruct...         -> "qwen3_instruct"
    Qwen/Qwen3-... (other)            -> "qwen3_disable_thinking"
    moonshotai/Kimi-K2.5...           -> "kimi_k25"
    moonshotai/Kimi-K2...             -> "kimi_k2"
    deepseek-ai/DeepSeek-V3...        -> "deepseekv3_disable_thinking"
    openai/gpt-oss...                 -> "gpt_oss_no_sysprompt"

and any other name is an InvalidInputError (a ValueError). `renderer_name_message` is the
hint that goes with a default: how to name a renderer yourself, and the renderer names ART
0.5.23 lists (tinker-cookbook's `get_renderer` takes each of them). arthex's own TinkerBackend
does not use renderers: it renders prompts with the base model's chat template, the same
rendering every arthex engine uses, so the token ids it trains on are the ones Tinker sampled
from; the renderer functions of `arthex.adapters.tinker.art_data` take a renderer you build.
"""

from __future__ import annotations

import logging

from ..core.errors import InvalidInputError

__all__ = ["get_renderer_name", "is_qwen3_dot_family_model", "renderer_name_message"]

logger = logging.getLogger(__name__)

# the renderer names ART 0.5.23's hint lists, in its order
_RENDERER_NAMES = (
    "role_colon", "llama3", "qwen3", "qwen3_vl", "qwen3_vl_instruct", "qwen3_disable_thinking",
    "qwen3_instruct", "qwen3_5", "qwen3_5_disable_thinking", "deepseekv3",
    "deepseekv3_disable_thinking", "deepseekv3_thinking", "kimi_k2", "kimi_k25",
    "kimi_k25_disable_thinking", "gpt_oss_no_sysprompt", "gpt_oss_low_reasoning",
    "gpt_oss_medium_reasoning", "gpt_oss_high_reasoning",
)  # fmt: skip

renderer_name_message = "\n".join(
    [
        "get_renderer_name picks a renderer from the base model's family. To use another one,",
        "build it by name with tinker-cookbook and pass it where a renderer is taken:",
        "",
        "from tinker_cookbook import renderers",
        'renderer = renderers.get_renderer("qwen3_disable_thinking", tokenizer)',
        "",
        "Valid renderer names are:",
        "",
        *(f"- {name}" for name in _RENDERER_NAMES),
    ]
)
"""The hint for choosing a renderer yourself, with the valid renderer names (ART prints it
when it picks a default; arthex's `get_renderer_name` logs one line instead)."""

# (prefix, words the name must hold or None, renderer, said when chosen by default)
_FAMILIES: tuple[tuple[str, str | None, str, str | None], ...] = (
    ("meta-llama/", None, "llama3", None),
    ("Qwen/Qwen3.", None, "qwen3_5_disable_thinking", None),
    ("Qwen/Qwen3-", "Instruct", "qwen3_instruct", None),
    ("Qwen/Qwen3-", None, "qwen3_disable_thinking", "Qwen3 without thinking"),
    ("moonshotai/Kimi-K2.5", None, "kimi_k25", "Kimi K2.5 with thinking"),
    ("moonshotai/Kimi-K2", None, "kimi_k2", "Kimi K2 with thinking"),
    ("deepseek-ai/DeepSeek-V3", None, "deepseekv3_disable_thinking", "DeepSeek-V3, no thinking"),
    ("openai/gpt-oss", None, "gpt_oss_no_sysprompt", "GPT-OSS without a system prompt"),
)


def is_qwen3_dot_family_model(base_model: str) -> bool:
    """True for the Qwen3.x family (`Qwen/Qwen3.5-...`), whose renderer differs from Qwen3's."""
    return base_model.startswith("Qwen/Qwen3.")


def get_renderer_name(base_model: str) -> str:
    """The tinker-cookbook renderer for `base_model` (see the module docstring)."""
    if not isinstance(base_model, str):
        raise InvalidInputError(f"base_model must be a model name, got {base_model!r}")
    for prefix, needs, renderer, default in _FAMILIES:
        if base_model.startswith(prefix) and (needs is None or needs in base_model):
            if default is not None:
                logger.info(
                    "using the %s renderer %r for %s; name another renderer to change it",
                    default,
                    renderer,
                    base_model,
                )
            return renderer
    raise InvalidInputError(
        f"no tinker-cookbook renderer is known for base model {base_model!r}: give the "
        "renderer's name yourself (llama3, qwen3, qwen3_5, deepseekv3, kimi_k2, gpt_oss, ...)"
    )
