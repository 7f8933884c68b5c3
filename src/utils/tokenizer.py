"""ART's `get_tokenizer`: a model's Hugging Face tokenizer, from a local folder or a hub name.

As in ART: the arguments go to `transformers.AutoTokenizer.from_pretrained`; a hub name may
carry a Tinker-style `:variant` suffix, which names a variant, not a tokenizer, so it is dropped
(a local folder's path is taken whole, colons and all); remote code is trusted for a local
folder, or where `HF_TRUST_REMOTE_CODE` is 1/true/yes, unless `trust_remote_code` is given.

Where arthex differs (docs/migrating-from-art.md): the chat template is the model's own, as
arthex's servers render it (ART rewrites some templates to keep past reasoning in the history,
for its renderers); ART's per-family loaders (Kimi's pinned revisions, DeepSeek-V4's encoder,
Tinker Cookbook's tokenizers and its public Llama fallback) are not here: AutoTokenizer loads
what the model's repository says.
"""

from __future__ import annotations

import os
from typing import Any

from ..core.errors import InvalidInputError, MissingExtraError

__all__ = ["get_tokenizer"]

_TRUE = ("1", "true", "yes")


def get_tokenizer(base_model: str, *, revision: str | None = None, **kwargs: Any) -> Any:
    """The tokenizer of `base_model` (a folder, or a hub name, optionally `name:variant`)."""
    if not isinstance(base_model, str) or not base_model.strip():
        raise InvalidInputError(
            f"base_model must be a model folder or hub name, got {base_model!r}"
        )
    try:
        from transformers import AutoTokenizer
    except ImportError as exc:
        raise MissingExtraError("transformers", "local") from exc
    local = os.path.isdir(base_model)
    model = base_model if local else base_model.split(":", 1)[0]
    kwargs.setdefault(
        "trust_remote_code",
        os.path.isdir(model) or os.environ.get("HF_TRUST_REMOTE_CODE", "").lower() in _TRUE,
    )
    if revision is not None:
        kwargs["revision"] = revision
    return AutoTokenizer.from_pretrained(model, **kwargs)
