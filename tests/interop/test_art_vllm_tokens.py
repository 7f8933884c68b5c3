"""`arthex.art.preprocessing.vllm_tokens` does what ART 0.5.23's does: the same cases (token
ids copied from a raw vLLM response onto a Choice, read back, and the completion-token counts
taken from a response's usage) go through ART's functions in ART's venv and through arthex's
here (art/vllm_tokens_script.py, one script for both), and every outcome agrees."""

from __future__ import annotations

from typing import Any

from .art_env import both_outcomes


def choice(*, token_ids: list[int] | None = None, prompt: list[int] | None = None,
           logprobs: int | None = None, index: int = 0) -> dict[str, Any]:  # fmt: skip
    found: dict[str, Any] = {
        "index": index,
        "finish_reason": "stop",
        "message": {"role": "assistant", "content": "x"},
        "logprobs": None,
    }
    if logprobs is not None:
        found["logprobs"] = {"content": [
            {"token": f"token_id:{k}", "logprob": -0.5, "bytes": None, "top_logprobs": []}
            for k in range(logprobs)
        ]}  # fmt: skip
    if token_ids is not None:
        found["token_ids"] = token_ids
    if prompt is not None:
        found["prompt_token_ids"] = prompt
    return found


def completion(choices: list[dict[str, Any]], used: int | None) -> dict[str, Any]:
    response: dict[str, Any] = {
        "id": "c", "object": "chat.completion", "created": 0, "model": "m", "choices": choices,
    }  # fmt: skip
    if used is not None:
        response["usage"] = {
            "prompt_tokens": 3,
            "completion_tokens": used,
            "total_tokens": 3 + used,
        }
    return response


CASES: dict[str, list[Any]] = {
    "attach": [
        {"choice": choice(), "index": 0,
         "payload": {"prompt_token_ids": [1, 2], "choices": [{"token_ids": [3, 4]}]}},
        {"choice": choice(), "index": 1,
         "payload": {"prompt_token_ids": [1], "choices": [{"token_ids": [3]}, {"token_ids": [5]}]}},
        {"choice": choice(), "index": 2, "payload": {"prompt_token_ids": [1], "choices": []}},
        {"choice": choice(), "index": 0, "payload": {"choices": [{"token_ids": [3]}]}},
        {"choice": choice(), "index": 0, "payload": {"prompt_token_ids": [1], "choices": [{}]}},
        {"choice": choice(), "index": 0,
         "payload": {"prompt_token_ids": "12", "choices": [{"token_ids": [3]}]}},
        {"choice": choice(), "index": 0, "payload": {"prompt_token_ids": [1], "choices": "x"}},
    ],
    "metadata": [
        choice(token_ids=[3], prompt=[1, 2]),
        choice(token_ids=[3]),
        choice(),
        choice(token_ids=None, prompt=[1]),
        choice(token_ids="3", prompt=[1]),  # type: ignore[arg-type]
    ],
    "completion": [
        completion([choice(token_ids=[1, 2], prompt=[0])], 2),
        completion([choice(token_ids=[1, 2], prompt=[0])], 5),
        completion([choice()], 4),
        completion([choice(logprobs=2), choice(logprobs=3, index=1)], 5),
        completion([choice(logprobs=2), choice(logprobs=3, index=1)], 6),
        completion([choice(logprobs=2), choice(index=1)], 6),
        completion([choice(logprobs=2)], None),
        completion([choice(token_ids=[1], prompt=[0]), choice(logprobs=4, index=1)], 5),
    ],
}  # fmt: skip


def test_vllm_tokens_give_arts_outcomes() -> None:
    art, ours = both_outcomes("vllm_tokens_script", CASES)
    assert ours == art
    assert art["key"] == "art_completion_tokens"
    assert "error" in art["attach"] and "error" in art["completion"]  # refusals exercised
    assert art["completion"][0] == [2] and art["attach"][0] == [[1, 2], [3, 4]]
