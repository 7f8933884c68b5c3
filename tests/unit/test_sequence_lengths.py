"""`max_seq_length_from_model_config` (ART's `art.dev.sequence_lengths`) on config.json
files written here: the expected length is the value written in the file, found by ART's
documented rule (the text section of a multimodal config first; the keys in the order
max_position_embeddings, n_positions, seq_length, max_sequence_length, model_max_length; a
positive integer below 1e9)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")


def model_folder(root: Path, config: dict[str, Any]) -> str:
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps({"model_type": "llama", **config}))
    return str(root)


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"max_position_embeddings": 32768}, 32768),
        ({"n_positions": 1024, "model_max_length": 4096}, 1024),
        ({"seq_length": 8192, "max_sequence_length": 2048}, 8192),
        ({"model_max_length": 512}, 512),
        ({"max_position_embeddings": 4096, "text_config": {"max_position_embeddings": 131072}},
         131072),
        ({"max_position_embeddings": 4096, "llm_config": {"hidden_size": 8}}, 4096),
        ({"max_position_embeddings": 10**9, "n_positions": 2048}, 2048),
        ({"max_position_embeddings": 0, "seq_length": 4096}, 4096),
        ({"max_position_embeddings": True, "seq_length": 300}, 300),
        ({"max_position_embeddings": 2048.0, "model_max_length": 77}, 77),
    ],
    ids=["max-pos", "n-pos-first", "seq-first", "model-max", "text-section-first",
         "section-without-length", "placeholder-skipped", "zero-skipped", "bool-skipped",
         "float-skipped"],
)  # fmt: skip
def test_the_length_is_the_first_usable_value_in_the_file(
    tmp_path: Path, config: dict[str, Any], expected: int
) -> None:
    from arthex.art.dev.sequence_lengths import max_seq_length_from_model_config

    assert max_seq_length_from_model_config(model_folder(tmp_path / "m", config)) == expected


def test_a_config_without_a_length_is_refused_naming_the_model(tmp_path: Path) -> None:
    from arthex.utils.sequence_lengths import max_seq_length_from_model_config

    folder = model_folder(tmp_path / "no-length", {"hidden_size": 8, "seq_length": -1})
    with pytest.raises(ValueError, match=r"no-length.*max_seq_length explicitly") as caught:
        max_seq_length_from_model_config(folder)
    assert "\n" not in str(caught.value)
