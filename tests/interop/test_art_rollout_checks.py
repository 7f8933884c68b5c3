"""ART 0.5.23's `art.utils.benchmark_rollout` and `suppress_litellm_serialization_warnings`
and arthex's under `arthex.art` give the same outcomes on the same cases
(art/rollout_checks_script.py, one script for both): the mean reward and the line printed,
a failing rollout's error, and which warnings stay shown."""

from __future__ import annotations

from .art_env import both_outcomes

SERIALIZER = (
    "Pydantic serializer warnings:\n  PydanticSerializationUnexpectedValue(Expected 9 fields "
    "but got 5: Expected `Message`)"
)


def test_art_and_arthex_agree_on_the_rollout_checks() -> None:
    cases = {
        "benchmarks": [
            ["gpt-4o", [1.0, 0.0, 0.5, 0.25], -1],
            ["agent@3", [0.3], -1],
            ["broken", [1.0, 1.0, 1.0], 1],
        ],
        "warnings": [
            [SERIALIZER, "pydantic.main"],  # LiteLLM's: hidden
            [SERIALIZER, "pydantic.other"],  # the same text from elsewhere: shown
            ["Pydantic serializer warnings: something else", "pydantic.main"],  # shown
        ],
    }
    art, arthex = both_outcomes("rollout_checks_script", cases)
    assert arthex == art
    assert art["benchmarks"][0] == [0.4375, "Average reward for gpt-4o: 0.4375\n"]
    assert art["benchmarks"][2] == ["ValueError", "rollout 1 failed"]
    assert [text for kind, text in art["shown"]] == [
        SERIALIZER, "Pydantic serializer warnings: something else", SERIALIZER,
    ]  # fmt: skip
