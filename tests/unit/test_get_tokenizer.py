"""`arthex.art.get_tokenizer` / `arthex.art.tokenizer.get_tokenizer`: a model folder's own
tokenizer, checked against the folder's files (tokenizer.json, chat_template.jinja)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("transformers")

from arthex.art import get_tokenizer as top_level
from arthex.art.tokenizer import get_tokenizer
from arthex.core.errors import InvalidInputError
from arthex.testing.tiny_model import tiny_model

TEXT = "Hello! What is two plus two?<|eos|>"


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return Path(tiny_model(tmp_path_factory.getbasetemp() / "tiny"))


def test_a_folders_tokenizer_encodes_as_its_tokenizer_json(folder: Path) -> None:
    from tokenizers import Tokenizer

    tokenizer = get_tokenizer(str(folder))
    expected = Tokenizer.from_file(str(folder / "tokenizer.json")).encode(TEXT).ids
    assert tokenizer.encode(TEXT, add_special_tokens=False) == expected
    assert tokenizer.chat_template == (folder / "chat_template.jinja").read_text()
    assert top_level is get_tokenizer


def test_a_variant_suffix_is_dropped_from_a_name_but_not_from_a_folder(
    folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(folder.parent)
    assert get_tokenizer(f"{folder.name}:variant-1").eos_token == "<|eos|>"
    with_colon = tmp_path / "a:b"
    with_colon.symlink_to(folder, target_is_directory=True)
    assert get_tokenizer(str(with_colon)).bos_token == "<|bos|>"


def test_a_blank_name_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="base_model must be"):
        get_tokenizer(" ")
