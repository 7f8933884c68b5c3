"""The token ids a Choice carries, under ART's names (`art.preprocessing.vllm_tokens`).

arthex trains on the ids the server sampled: `prompt_token_ids` and `token_ids` in
`choice.model_extra`, which arthex's servers put there themselves. A client that calls vLLM
directly (with `return_token_ids`) gets them in the raw response instead, the prompt's once for
the response and the sampled ones per choice; `attach_vllm_token_metadata_to_choice` copies
them onto the parsed Choice, so the trajectory trains. The completion-token count
(`COMPLETION_TOKENS_KEY`) records how many tokens each choice generated, from the response's
usage, as ART does for its cost and token metrics.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from openai.types.chat.chat_completion import Choice

from ..core.errors import InvalidInputError

__all__ = [
    "COMPLETION_TOKENS_KEY",
    "attach_completion_token_metadata",
    "attach_vllm_token_metadata_to_choice",
    "choice_completion_tokens",
    "choice_vllm_token_metadata",
]

COMPLETION_TOKENS_KEY = "art_completion_tokens"


def _ids(value: object, key: str) -> list[int]:
    if value is None:
        raise InvalidInputError(f"the choice lacks {key}")
    if not isinstance(value, list):
        raise InvalidInputError(f"{key} must be a list of token ids, got {type(value).__name__}")
    return [int(v) for v in value]


def _extra(choice: Choice) -> dict[str, Any]:
    extra = choice.model_extra
    if extra is None:  # a Choice always keeps its extra fields; this is a pydantic guard
        raise InvalidInputError("the Choice keeps no extra fields to hold token ids")
    return extra


def attach_vllm_token_metadata_to_choice(
    *, choice: Choice, response_payload: Mapping[str, Any], choice_index: int = 0
) -> None:
    """Copy the response's `prompt_token_ids` and its choice's `token_ids` onto `choice`;
    nothing when the response lacks either."""
    prompt = response_payload.get("prompt_token_ids")
    choices = response_payload.get("choices")
    if not isinstance(choices, list) or not 0 <= choice_index < len(choices):
        return
    raw = choices[choice_index]
    sampled = raw.get("token_ids") if isinstance(raw, Mapping) else None
    if prompt is None or sampled is None:
        return
    extra = _extra(choice)
    extra["prompt_token_ids"] = _ids(prompt, "prompt_token_ids")
    extra["token_ids"] = _ids(sampled, "token_ids")


def choice_vllm_token_metadata(choice: Choice) -> tuple[list[int], list[int]] | None:
    """(prompt ids, sampled ids) of a Choice, or None when it carries neither pair."""
    extra = choice.model_extra or {}
    if "prompt_token_ids" not in extra or "token_ids" not in extra:
        return None
    return _ids(extra["prompt_token_ids"], "prompt_token_ids"), _ids(
        extra["token_ids"], "token_ids"
    )


def _generated(choice: Choice) -> int | None:
    found = choice_vllm_token_metadata(choice)
    if found is not None:
        return len(found[1])
    logprobs = choice.logprobs
    if logprobs is None or (logprobs.content is None and logprobs.refusal is None):
        return None
    return len(logprobs.content or []) + len(logprobs.refusal or [])


def attach_completion_token_metadata(response: Any) -> None:
    """Record on each choice of a chat completion how many tokens it generated: the usage's
    count for a lone choice, each choice's own count (which must add up to the usage's)
    otherwise; nothing when the response has no usage or a choice's count is unknown."""
    choices = getattr(response, "choices", None)
    total = getattr(getattr(response, "usage", None), "completion_tokens", None)
    if not choices or total is None:
        return
    if isinstance(total, bool) or not isinstance(total, int) or total < 0:
        raise InvalidInputError(f"usage.completion_tokens must be a count, got {total!r}")
    counts = [_generated(choice) for choice in choices]
    if len(choices) == 1:
        if counts[0] is not None and counts[0] != total:
            raise InvalidInputError(
                f"the choice generated {counts[0]} tokens but usage.completion_tokens is {total}"
            )
        counts = [total]
    elif None in counts:
        return
    known = [count for count in counts if count is not None]
    if sum(known) != total:
        raise InvalidInputError(
            f"the choices generated {known} tokens, which do not add up to "
            f"usage.completion_tokens={total}"
        )
    for choice, count in zip(choices, known, strict=True):
        _extra(choice)[COMPLETION_TOKENS_KEY] = count


def choice_completion_tokens(choice: Choice) -> int | None:
    """The count `attach_completion_token_metadata` recorded on the choice, if any."""
    value = (choice.model_extra or {}).get(COMPLETION_TOKENS_KEY)
    return value if isinstance(value, int) and not isinstance(value, bool) else None
