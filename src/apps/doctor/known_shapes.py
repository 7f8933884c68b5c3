"""The shapes of common base models, so that `arthex doctor` plans memory for them offline,
before anything is downloaded. Each entry is what the model's `config.json` on the hub says
(the fields `ModelShape` reads); an instruct model has its base's shape.
"""

from __future__ import annotations

from typing import Any

from .memory import ModelShape


def _qwen25(vocab: int, hidden: int, inter: int, layers: int, heads: int, kv: int) -> ModelShape:
    tied = vocab == 151936  # the small ones tie their head to the embeddings
    return ModelShape(
        vocab=vocab, hidden=hidden, intermediate=inter, layers=layers, heads=heads,
        kv_heads=kv, head_dim=hidden // heads, tied=tied, context=32768, qkv_bias=True,
    )  # fmt: skip


def _qwen3(hidden: int, inter: int, layers: int, heads: int, tied: bool) -> ModelShape:
    return ModelShape(
        vocab=151936, hidden=hidden, intermediate=inter, layers=layers, heads=heads,
        kv_heads=8, head_dim=128, tied=tied, context=40960,
    )  # fmt: skip


def _llama(**fields: Any) -> ModelShape:
    return ModelShape(**{"vocab": 128256, "kv_heads": 8, "context": 131072, **fields})


_QWEN25 = {
    "0.5B": _qwen25(151936, 896, 4864, 24, 14, 2),
    "1.5B": _qwen25(151936, 1536, 8960, 28, 12, 2),
    "3B": _qwen25(151936, 2048, 11008, 36, 16, 2),
    "7B": _qwen25(152064, 3584, 18944, 28, 28, 4),
    "14B": _qwen25(152064, 5120, 13824, 48, 40, 8),
    "32B": _qwen25(152064, 5120, 27648, 64, 40, 8),
    "72B": _qwen25(152064, 8192, 29568, 80, 64, 8),
}
_QWEN3 = {
    "0.6B": _qwen3(1024, 3072, 28, 16, tied=True),
    "1.7B": _qwen3(2048, 6144, 28, 16, tied=True),
    "4B": _qwen3(2560, 9728, 36, 32, tied=True),
    "8B": _qwen3(4096, 12288, 36, 32, tied=False),
    "14B": _qwen3(5120, 17408, 40, 40, tied=False),
    "32B": _qwen3(5120, 25600, 64, 64, tied=False),
}
_LLAMA = {
    "Llama-3.2-1B": _llama(
        hidden=2048, intermediate=8192, layers=16, heads=32, head_dim=64, tied=True
    ),
    "Llama-3.2-3B": _llama(
        hidden=3072, intermediate=8192, layers=28, heads=24, head_dim=128, tied=True
    ),
    "Llama-3.1-8B": _llama(
        hidden=4096, intermediate=14336, layers=32, heads=32, head_dim=128, tied=False
    ),
    "Llama-3.1-70B": _llama(
        hidden=8192, intermediate=28672, layers=80, heads=64, head_dim=128, tied=False
    ),
}
_MISTRAL_7B = ModelShape(
    vocab=32768, hidden=4096, intermediate=14336, layers=32, heads=32, kv_heads=8,
    head_dim=128, tied=False, context=32768,
)  # fmt: skip

KNOWN_SHAPES: dict[str, ModelShape] = {
    **{f"Qwen/Qwen2.5-{size}{kind}": shape for size, shape in _QWEN25.items()
       for kind in ("", "-Instruct")},
    **{f"Qwen/Qwen3-{size}{kind}": shape for size, shape in _QWEN3.items()
       for kind in ("", "-Base")},
    **{f"meta-llama/{name}{kind}": shape for name, shape in _LLAMA.items()
       for kind in ("", "-Instruct")},
    "mistralai/Mistral-7B-v0.3": _MISTRAL_7B,
    "mistralai/Mistral-7B-Instruct-v0.3": _MISTRAL_7B,
}  # fmt: skip


def known_shape(base_model: str) -> ModelShape | None:
    """The shipped shape of `base_model` (a hub id, any letter case), or None."""
    wanted = base_model.lower()
    for name, shape in KNOWN_SHAPES.items():
        if name.lower() == wanted:
            return shape
    return None
