"""A base model's longest sequence, read from its Hugging Face config (ART's
`art.dev.sequence_lengths.max_seq_length_from_model_config`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["max_seq_length_from_model_config"]

# Where configs state the context length, in the order they are read; a multimodal model's
# text part (its own section) is read before the top level.
LENGTH_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "seq_length",
    "max_sequence_length",
    "model_max_length",
)
TEXT_SECTIONS = ("text_config", "llm_config", "language_config")
LONGEST = 1_000_000_000  # a value this large is a "no limit" placeholder, not a length


def _sections(config: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    for key in TEXT_SECTIONS:
        section = config.get(key)
        if isinstance(section, Mapping):
            yield section
    yield config


def length_in_config(config: Mapping[str, Any]) -> int | None:
    """The first usable length in `config` (a config.json's dict), or None: a positive int
    below `LONGEST` (a bool or a float is not a length)."""
    for section in _sections(config):
        for key in LENGTH_KEYS:
            value = section.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and 0 < value < LONGEST:
                return value
    return None


def max_seq_length_from_model_config(
    base_model: str, *, revision: str | None = None, token: str | None = None
) -> int:
    """The context length `base_model` (a folder, or a hub id in the local cache or
    reachable) states in its config.json; ValueError naming the model when none is usable.
    Reading the config needs transformers (the `local` extra)."""
    try:
        from transformers import PretrainedConfig
    except ImportError as error:
        raise ImportError(
            "max_seq_length_from_model_config reads the model's config with transformers: "
            "pip install 'arthex[local]'"
        ) from error
    options = {"revision": revision, "token": token}
    config, _ = PretrainedConfig.get_config_dict(
        base_model, **{key: value for key, value in options.items() if value is not None}
    )
    length = length_in_config(config)
    if length is None:
        raise ValueError(
            f"the config of {base_model!r} states no context length (none of "
            f"{', '.join(LENGTH_KEYS)} is a positive integer, at the top level or in "
            f"{', '.join(TEXT_SECTIONS)}): set max_seq_length explicitly"
        )
    return length
