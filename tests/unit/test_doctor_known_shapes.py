"""The shapes `arthex doctor` ships for offline plans, against the parameter counts the
models' cards publish (exact where the card gives the exact count, else to the card's
three significant figures)."""

from __future__ import annotations

import pytest

from arthex.apps.doctor.known_shapes import KNOWN_SHAPES, known_shape

EXACT = {
    "meta-llama/Llama-3.1-8B": 8_030_261_248,
    "meta-llama/Llama-3.2-1B": 1_235_814_400,
    "meta-llama/Llama-3.2-3B": 3_212_749_824,
    "meta-llama/Llama-3.1-70B": 70_553_706_496,
    "mistralai/Mistral-7B-v0.3": 7_248_023_552,
    "Qwen/Qwen2.5-0.5B": 494_032_768,
}
ROUNDED = {  # billions, as the cards print them
    "Qwen/Qwen2.5-1.5B": 1.54,
    "Qwen/Qwen2.5-3B": 3.09,
    "Qwen/Qwen2.5-7B": 7.61,
    "Qwen/Qwen2.5-14B": 14.7,
    "Qwen/Qwen2.5-32B": 32.8,  # the hub's count of its weight files; the card says 32.5
    "Qwen/Qwen2.5-72B": 72.7,
    "Qwen/Qwen3-4B": 4.02,
    "Qwen/Qwen3-8B": 8.19,
    "Qwen/Qwen3-14B": 14.8,
    "Qwen/Qwen3-32B": 32.8,
}


@pytest.mark.parametrize(("name", "params"), EXACT.items())
def test_exact_published_counts(name: str, params: int) -> None:
    shape = known_shape(name)
    assert shape is not None and shape.params == params


@pytest.mark.parametrize(("name", "billions"), ROUNDED.items())
def test_rounded_published_counts(name: str, billions: float) -> None:
    shape = known_shape(name)
    assert shape is not None
    # the plan leaves out Qwen3's per-head q/k norms (a few hundred thousand parameters)
    assert shape.params / 1e9 == pytest.approx(billions, rel=0.005)


def test_instruct_models_have_their_bases_shape_and_case_does_not_matter() -> None:
    assert known_shape("qwen/qwen2.5-7b-instruct") == KNOWN_SHAPES["Qwen/Qwen2.5-7B"]
    assert (
        known_shape("meta-llama/Llama-3.1-8B-Instruct") == KNOWN_SHAPES["meta-llama/Llama-3.1-8B"]
    )
    assert known_shape("someone/unknown") is None
