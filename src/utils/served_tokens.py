"""The token ids a chat-completion server returned with a choice, read as ART 0.5.23 reads
them: `prompt_token_ids` (on the choice or the response) and `token_ids` (on the choice),
ids written as integers or as `token_id:N`, else the ids the choice's logprob entries carry;
and the two comparisons of token runs the derived histories need."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from openai.types.chat.chat_completion import Choice

_TOKEN_ID = re.compile(r"token_id:(\d+)$")
# Extras by which a server reports the sampled tokens' logprobs in a compact list.
COMPACT_LOGPROBS = ("compact_logprobs", "art_completion_logprobs")
# A reply with any of these says something, so it cannot have sampled no tokens.
_SPOKEN = ("content", "refusal", "reasoning", "reasoning_content", "tool_calls", "function_call")


def is_prefix(prefix: Sequence[object], value: Sequence[object]) -> bool:
    """`value` starts with `prefix`, item by item."""
    return len(prefix) <= len(value) and all(a == b for a, b in zip(prefix, value))


def extra(value: object, name: str) -> object:
    """A field the server added to a response or a choice (None: not there)."""
    fields = getattr(value, "model_extra", None) or {}
    return fields.get(name)


def token_id(value: object) -> int | None:
    """One exact token id: a non-negative integer, or `token_id:N` (None: neither)."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str) and (match := _TOKEN_ID.fullmatch(value)):
        return int(match.group(1))
    return None


def token_ids(values: object, field: str) -> list[int] | None:
    """Token ids as the server sent them (None: not sent); `field` names them in the error."""
    if values is None:
        return None
    if not isinstance(values, list):
        raise ValueError(f"{field} exact token metadata must be a list")
    ids = [token_id(value) for value in values]
    if any(i is None for i in ids):
        raise ValueError(f"{field} contains an invalid exact token ID")
    return [i for i in ids if i is not None]


def sampled_ids(choice: Choice) -> list[int] | None:
    """The token ids the server sampled for a choice: its `token_ids`, else the ids its
    logprob entries carry; None where unknown."""
    ids = token_ids(extra(choice, "token_ids"), "Chat Completions token_ids")
    if any(key in (choice.model_extra or {}) for key in COMPACT_LOGPROBS):
        return ids
    entries: list[Any] = []
    if choice.logprobs is not None:
        entries = [*(choice.logprobs.content or []), *(choice.logprobs.refusal or [])]
    message = choice.message
    said = any(getattr(message, key, None) for key in _SPOKEN)
    if ids == [] and (entries or said):
        ids = None
    paired, paired_logprobs = _paired_ids(entries)
    if ids is not None and paired and ids != paired:
        raise ValueError("Response token IDs disagree with choice logprobs")
    selected = ids if ids is not None else paired or None
    logprobs = paired_logprobs or _positional_logprobs(entries)
    if selected is not None and entries and len(logprobs) != len(selected):
        raise ValueError("Chat Completions token IDs and logprobs differ in length")
    return selected


def _paired_ids(entries: list[Any]) -> tuple[list[int], list[float]]:
    """The ids (and logprobs) the logprob entries carry, as `token_id` or a `token_id:N`
    token; none unless every entry carries one."""
    ids: list[int] = []
    logprobs: list[float] = []
    complete = True
    for entry in entries:
        data = entry.model_dump(mode="python")
        raw = data["token_id"] if "token_id" in data else data.get("token")
        found = token_id(raw)
        if found is None and ("token_id" in data or str(raw).startswith("token_id:")):
            raise ValueError("Chat Completions logprobs contains an invalid exact token ID")
        if found is None:
            complete = False
            continue
        ids.append(found)
        logprob = data.get("logprob")
        numeric = isinstance(logprob, (int, float)) and not isinstance(logprob, bool)
        logprobs.append(float(logprob) if numeric else float("nan"))
    return (ids, logprobs) if complete else ([], [])


def _positional_logprobs(entries: list[Any]) -> list[float]:
    values: list[float] = []
    for entry in entries:
        logprob = getattr(entry, "logprob", None)
        if not isinstance(logprob, (int, float)) or isinstance(logprob, bool):
            return []
        values.append(float(logprob))
    return values


def _borders(tokens: Sequence[int]) -> list[int]:
    """For each position, the length of the longest proper prefix of `tokens[: i + 1]` that
    is also its suffix (linear time: replies and prompts run to many thousand tokens)."""
    borders = [0] * len(tokens)
    for i in range(1, len(tokens)):
        k = borders[i - 1]
        while k and tokens[i] != tokens[k]:
            k = borders[k - 1]
        borders[i] = k + 1 if tokens[i] == tokens[k] else 0
    return borders


def contains(tokens: Sequence[int], part: Sequence[int]) -> bool:
    """`part` occurs in `tokens` as a contiguous run."""
    if not part:
        return True
    # token ids are non-negative, so -1 separates the two
    return len(part) in _borders([*part, -1, *tokens])[len(part) + 1 :]


def keeps_reply_tail(
    before: list[int] | None, reply: list[int] | None, prompt: list[int] | None
) -> bool:
    """The prompt starts with the earlier prompt, and the earlier reply ends with the start of
    what follows it: the reply is there, though re-rendered (a template that trims its
    beginning, such as a reasoning span)."""
    if before is None or reply is None or prompt is None or not is_prefix(before, prompt):
        return False
    after = prompt[len(before) :]
    if not reply or not after:
        return False
    return _borders([*after, -1, *reply])[-1] > 0
