"""ART 0.5.23's `utils.model_config` (chat-template markers) and `utils.cache_dirs` (cache
variables, filesystem types) and arthex's under `arthex.art` give the same outcomes on the same
cases (art/templates_and_caches_script.py, one script for both)."""

from __future__ import annotations

from pathlib import Path

from .art_env import both_outcomes

TEMPLATES = [
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}",
    "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>"
    "\n\n{{ m['content'] }}<|eot_id|>{% endfor %}",
    "{% for m in messages %}<|turn>{{ m['role'] }}\n{{ m['content'] }}<turn|>{% endfor %}",
    "{% for m in messages %}<start_of_turn>{{ m['role'] }}\n{{ m['content'] }}<end_of_turn>"
    "{% endfor %}",
    "{% for m in messages %}[INST] {{ m['content'] }} [/INST]{% endfor %}",
    "<|im_start|> and [INST] both: the first family wins",
    "{% for m in messages %}### {{ m['role'] }}: {{ m['content'] }}{% endfor %}" * 3,
    "",
]
MODEL_IDS = ["OpenPipe/Qwen3-14B-Instruct", "Qwen/Qwen3-8B"]


def environs(tmp: Path) -> list[list[object]]:
    root = str(tmp / "root")
    return [
        [{}, None],
        [{}, root],
        [{"ART_MEGATRON_CACHE_ROOT": root}, None],
        [{"ART_MEGATRON_CACHE_ROOT": root, "HF_HOME": "/data/hf"}, str(tmp / "moved")],
        [{"XDG_CACHE_HOME": "/tmp/art-cache", "HF_HOME": "/tmp/art-cache/huggingface",
          "TORCH_CUDA_ARCH_LIST": "8.0 9.0+PTX"}, str(tmp / "moved")],
        [{"HUGGINGFACE_HUB_CACHE": "~/hub", "TRITON_CACHE_DIR": "/keep/triton"}, None],
        [{"HUGGINGFACE_HUB_CACHE": "/tmp/art-cache/huggingface/hub"}, str(tmp / "moved")],
        [{"HF_HUB_CACHE": "", "CUDA_ARCH_LIST": "sm_90a"}, "~/caches"],
    ]  # fmt: skip


def test_templates_and_caches_give_arts_outcomes(tmp_path: Path) -> None:
    cases = {
        "templates": TEMPLATES,
        "model_ids": MODEL_IDS,
        "environs": environs(tmp_path),
        "compiled": [["/c", {}], ["/c", {"TORCH_CUDA_ARCH_LIST": "8.0;8.6 9.0"}],
                     ["rel", {"CUDA_ARCH_LIST": "a/b\\c"}]],
        "paths": ["/", "/proc/self", str(tmp_path), str(tmp_path / "not" / "there"), "~"],
    }  # fmt: skip
    art, ours = both_outcomes("templates_and_caches_script", cases)
    assert ours == art
    assert art["detect"][0] == {"value": ["<|im_start|>user\n", "<|im_start|>assistant\n"]}
    assert art["detect"][-1]["error"] == "ValueError"
    assert art["env"][0][0] == "/tmp/art-cache" and all(art["env"][1::2])
