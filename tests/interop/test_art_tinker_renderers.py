"""ART 0.5.23's `art.tinker.get_renderer_name` and arthex's under `arthex.art` name the same
tinker-cookbook renderer for the same base models, and refuse the same unknown ones
(art/tinker_renderers_script.py, one script for both, one run of ART's interpreter)."""

from __future__ import annotations

from .art_env import both_outcomes

BASE_MODELS = [
    "meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.2-1B", "meta-llama/",
    "Qwen/Qwen3.5-4B", "Qwen/Qwen3.5-397B-A17B", "Qwen/Qwen3-8B", "Qwen/Qwen3-30B-A3B",
    "Qwen/Qwen3-4B-Instruct-2507", "Qwen/Qwen3-VL-30B-A3B-Instruct", "Qwen/Qwen3",
    "Qwen/Qwen2.5-7B-Instruct", "qwen/Qwen3-8B", "moonshotai/Kimi-K2.5",
    "moonshotai/Kimi-K2-Thinking", "moonshotai/Kimi-K2", "moonshotai/Kimi-K3",
    "deepseek-ai/DeepSeek-V3.1", "deepseek-ai/DeepSeek-R1", "openai/gpt-oss-20b",
    "openai/gpt-4o", "Meta-Llama/Llama-3.1-8B", "", "./models/tiny",
]  # fmt: skip


def test_get_renderer_name_gives_arts_renderers() -> None:
    art, ours = both_outcomes("tinker_renderers_script", {"base_models": BASE_MODELS})
    assert ours == art
    assert art["same"] is True
    assert art["names"][5] == "qwen3_disable_thinking" and art["names"][-1] == "ValueError"
