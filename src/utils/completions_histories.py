"""A trajectory's legacy Completions calls as ART's `CompletionsTokenHistory` objects, as ART
0.5.23's `Trajectory.completions_token_histories()` builds them: token sequences on the same
branch tree as the chat histories (`utils.history_branches`), each prompt token sourced from
its call's prompt and each sampled token from its choice, as runs of equal sources (spans).

Every choice needs exact token ids: the prompt's (`prompt_token_ids` on the choice or the
response, else a token-id prompt in the request) and the sampled ones (`token_ids`, else ids
its logprob tokens carry as `token_id:N`). A batched request's choices go to its prompts by
`prompt_index`, by matching prompt ids, or `n` at a time in index order.

`completions_string_histories` gives the text form ART falls back to without exact ids: one
character per item, a call continuing the longest branch whose text its prompt starts with
(where the served prompt ids extend that branch's last prompt and sample, unless
`reconcile_text_equivalent_tokenizations`); an echoed prompt is cut from the choice's text.
The token histories of an echoed prompt are not derived here.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

from openai.types import CompletionChoice

from ..core.trajectories import Trajectory
from .art_trajectories import (
    CompletionsExchange,
    CompletionsSource,
    CompletionsStringHistory,
    CompletionsStringSourceSpan,
    CompletionsTokenHistory,
    CompletionsTokenSourceSpan,
)
from .history_branches import Branch, BranchTree, Output, by_model
from .served_tokens import COMPACT_LOGPROBS, extra, is_prefix, token_id, token_ids

_PROTOCOL = "Completions"
_UNMATCHED = "Cannot associate Completions choices with batched prompts"
Tokens = tuple[list[int] | None, list[int] | None]


def completions_token_histories(
    trajectory: Trajectory, *, model: str | None = None
) -> list[CompletionsTokenHistory]:
    """Every token history of the trajectory's Completions calls, per model, branches in the
    order they were made."""
    records = [CompletionsExchange.model_validate(r) for r in trajectory.exchanges.completions]
    histories: list[CompletionsTokenHistory] = []
    for served, exchanges in by_model(records, model, _PROTOCOL):
        tree = BranchTree()
        complete = True
        for sequence, exchange in enumerate(exchanges):
            if exchange.request.get("suffix") is not None:
                raise ValueError("Completions suffix is not supported")
            if exchange.request.get("echo") is True:
                raise ValueError("arthex does not derive histories of echoed Completions prompts")
            prompts = _prompts(exchange.request.get("prompt"))
            for prompt_index, (asked, choices) in enumerate(
                zip(prompts, _choice_groups(exchange, prompts), strict=True)
            ):
                for choice in choices:
                    prompt, sampled = _tokens(exchange, choice)
                    if prompt is None and isinstance(asked, list):
                        prompt = list(asked)
                    if prompt is None or sampled is None:
                        complete = False
                        continue
                    source = CompletionsSource(exchange=exchange, prompt_index=prompt_index)
                    output = CompletionsSource(
                        exchange=exchange, prompt_index=prompt_index, choice_index=choice.index
                    )
                    tree.extend(
                        prompt,
                        [source] * len(prompt),
                        [],
                        [Output(choice.index, sampled, [output] * len(sampled), [])],
                        (),
                        sequence,
                        exchange.start_time,
                        lambda _: True,
                    )
        if not complete:
            raise ValueError("Completions token history requires exact token IDs for every choice")
        for branch in tree.branches:
            histories.append(
                CompletionsTokenHistory(
                    model=served,
                    prompt=copy.deepcopy(branch.items),
                    prompt_sources=[
                        CompletionsTokenSourceSpan(start=start, end=end, source=source)
                        for start, end, source in _runs(branch.sources)
                    ],
                    sampled_spans=[
                        (start, end)
                        for start, end, source in _runs(branch.sources)
                        if source is not None and source.choice_index is not None
                    ],
                )
            )
    if not histories:
        raise ValueError("Completions token history requires exact token IDs")
    return histories


def completions_token_history(
    trajectory: Trajectory, *, model: str | None = None
) -> CompletionsTokenHistory:
    """The trajectory's one Completions token history."""
    histories = completions_token_histories(trajectory, model=model)
    if len(histories) != 1:
        raise ValueError(
            f"Completions token history requires exactly one history; found {len(histories)}"
        )
    return histories[0]


def completions_string_histories(
    trajectory: Trajectory,
    *,
    model: str | None = None,
    reconcile_text_equivalent_tokenizations: bool = False,
) -> list[CompletionsStringHistory]:
    """Every text history of the trajectory's Completions calls, per model, branches in the
    order they were made."""
    records = [CompletionsExchange.model_validate(r) for r in trajectory.exchanges.completions]
    histories: list[CompletionsStringHistory] = []
    for served, exchanges in by_model(records, model, _PROTOCOL):
        tree = BranchTree()
        cache: dict[tuple[int, int], Tokens] = {}
        complete = True
        for sequence, exchange in enumerate(exchanges):
            if exchange.request.get("suffix") is not None:
                raise ValueError("Completions suffix is not supported")
            echoed = exchange.request.get("echo") is True
            prompts = _prompts(exchange.request.get("prompt"))
            groups = _choice_groups(exchange, prompts)
            for prompt_index, (prompt, choices) in enumerate(zip(prompts, groups, strict=True)):
                if not isinstance(prompt, str):
                    complete = False
                    continue
                for choice in choices:
                    text = choice.text
                    if echoed:
                        if not text.startswith(prompt):
                            raise ValueError("Cannot locate echoed Completions prompt boundary")
                        text = text[len(prompt) :]
                    source = CompletionsSource(exchange=exchange, prompt_index=prompt_index)
                    output = CompletionsSource(
                        exchange=exchange, prompt_index=prompt_index, choice_index=choice.index
                    )
                    prompt_ids = _cached(cache, exchange, choice, echoed)[0]
                    tree.extend(
                        list(prompt),
                        [source] * len(prompt),
                        [],
                        [Output(choice.index, list(text), [output] * len(text), [])],
                        (),
                        sequence,
                        exchange.start_time,
                        _follows(
                            cache,
                            prompt_ids,
                            len(prompt),
                            reconcile_text_equivalent_tokenizations,
                        ),
                    )
        if not complete:
            raise ValueError("Completions string history requires text prompts for every choice")
        for branch in tree.branches:
            runs = _runs(branch.sources)
            histories.append(
                CompletionsStringHistory(
                    model=served,
                    prompt="".join(branch.items),
                    prompt_sources=[
                        CompletionsStringSourceSpan(start=start, end=end, source=source)
                        for start, end, source in runs
                    ],
                    sampled_spans=[
                        (start, end)
                        for start, end, source in runs
                        if source is not None and source.choice_index is not None
                    ],
                )
            )
    if not histories:
        raise ValueError("Completions string history requires text prompts")
    return histories


def completions_string_history(
    trajectory: Trajectory,
    *,
    model: str | None = None,
    reconcile_text_equivalent_tokenizations: bool = False,
) -> CompletionsStringHistory:
    """The trajectory's one Completions text history."""
    histories = completions_string_histories(
        trajectory,
        model=model,
        reconcile_text_equivalent_tokenizations=reconcile_text_equivalent_tokenizations,
    )
    if len(histories) != 1:
        raise ValueError(
            f"Completions string history requires exactly one history; found {len(histories)}"
        )
    return histories[0]


def _cached(
    cache: dict[tuple[int, int], Tokens],
    exchange: CompletionsExchange,
    choice: CompletionChoice,
    echoed: bool,
) -> Tokens:
    """A choice's tokens, once; of an echoed prompt only the served prompt ids are read."""
    key = (id(exchange), choice.index)
    if key not in cache:
        if echoed:
            prompt = extra(choice, "prompt_token_ids")
            if prompt is None:
                prompt = extra(exchange.response, "prompt_token_ids")
            prompt_ids = token_ids(prompt, "Completions prompt_token_ids") or None
            cache[key] = (_with_request_prompt(exchange, prompt_ids), None)
        else:
            cache[key] = _tokens(exchange, choice)
    return cache[key]


def _follows(
    cache: dict[tuple[int, int], Tokens],
    prompt_ids: list[int] | None,
    size: int,
    reconcile: bool,
) -> Callable[[Branch], bool]:
    """Whether a call continues a branch: its served prompt ids start with the branch's last
    prompt and sample (true where either is unknown)."""

    def follows(branch: Branch) -> bool:
        if reconcile or prompt_ids is None:
            return True
        source = next(
            (
                s
                for s in reversed(branch.sources[:size])
                if s is not None and s.choice_index is not None
            ),
            None,
        )
        if source is None:
            return True
        before, sampled = cache[(id(source.exchange), source.choice_index)]
        return before is None or sampled is None or is_prefix([*before, *sampled], prompt_ids)

    return follows


def _runs(sources: Sequence[Any]) -> list[tuple[int, int, Any]]:
    """Maximal runs of equal sources, as (start, end, source)."""
    runs: list[tuple[int, int, Any]] = []
    for index, source in enumerate(sources):
        if runs and runs[-1][2] == source:
            runs[-1] = (runs[-1][0], index + 1, source)
        else:
            runs.append((index, index + 1, source))
    return runs


def _ids(value: Sequence[object]) -> list[int]:
    if any(not isinstance(t, int) or isinstance(t, bool) or t < 0 for t in value):
        raise ValueError("Completions token prompts must contain non-negative integers")
    return [t for t in value if isinstance(t, int)]


def _prompts(value: object) -> list[str | list[int]]:
    """The request's prompts: one text, one token-id list, or a batch of either."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        if all(isinstance(t, int) and not isinstance(t, bool) for t in value):
            return [_ids(value)]
        prompts: list[str | list[int]] = []
        for item in value:
            if isinstance(item, str):
                prompts.append(item)
            elif isinstance(item, list) and all(
                isinstance(t, int) and not isinstance(t, bool) for t in item
            ):
                prompts.append(_ids(item))
            else:
                raise ValueError("Invalid batched Completions prompt")
        return prompts
    raise ValueError("Completions prompt must be text or token IDs")


def _ordered(choices: Sequence[CompletionChoice]) -> list[CompletionChoice]:
    if not choices:
        raise ValueError(f"{_PROTOCOL} response contains no choices")
    indices = [choice.index for choice in choices]
    if any(not isinstance(i, int) or isinstance(i, bool) or i < 0 for i in indices):
        raise ValueError(f"{_PROTOCOL} choice indices must be non-negative integers")
    if len(set(indices)) != len(indices):
        raise ValueError(f"{_PROTOCOL} response contains duplicate choice indices")
    return sorted(choices, key=lambda choice: choice.index)


def _choice_groups(
    exchange: CompletionsExchange, prompts: list[str | list[int]]
) -> list[list[CompletionChoice]]:
    """Each prompt's choices."""
    count = len(prompts)
    choices = _ordered(exchange.response.choices)
    named: dict[int, int] = {}
    for choice in choices:
        fields = choice.model_extra or {}
        if "prompt_index" not in fields:
            continue
        index = fields["prompt_index"]
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < count:
            raise ValueError("Completions choice prompt_index must identify a batched prompt")
        named[choice.index] = index
    if count == 1:
        return [choices]
    n = exchange.request.get("n")
    if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
        raise ValueError("Completions n must be a positive integer")
    matched: dict[int, int] = {}
    for choice in choices:
        prompt_ids, _ = _tokens(exchange, choice)
        if prompt_ids is None:
            continue
        same = [i for i, prompt in enumerate(prompts) if prompt == prompt_ids]
        told = named.get(choice.index)
        if told is not None and isinstance(prompts[told], list) and prompts[told] != prompt_ids:
            raise ValueError("Completions prompt_index contradicts exact prompt evidence")
        if len(same) == 1:
            matched[choice.index] = same[0]
    evidence = {**matched, **named}
    if len(evidence) == len(choices):
        groups: list[list[CompletionChoice]] = [[] for _ in prompts]
        for choice in choices:
            groups[evidence[choice.index]].append(choice)
        if all(groups) and (n is None or all(len(group) == n for group in groups)):
            return groups
        raise ValueError(_UNMATCHED)
    per_prompt, left = divmod(len(choices), count)
    if left or (n is not None and n != per_prompt):
        raise ValueError(_UNMATCHED)
    if [choice.index for choice in choices] != list(range(len(choices))):
        raise ValueError("Ambiguous Completions choice-to-prompt association")
    groups = [choices[i * per_prompt : (i + 1) * per_prompt] for i in range(count)]
    for index, group in enumerate(groups):
        if any(evidence.get(choice.index, index) != index for choice in group):
            raise ValueError("Completions prompt evidence contradicts choice indices")
    return groups


def _tokens(exchange: CompletionsExchange, choice: CompletionChoice) -> Tokens:
    """A choice's exact prompt and sampled token ids (None: unknown)."""
    prompt = extra(choice, "prompt_token_ids")
    if prompt is None:
        prompt = extra(exchange.response, "prompt_token_ids")
    prompt_ids = token_ids(prompt, "Completions prompt_token_ids") or None
    sampled = token_ids(extra(choice, "token_ids"), "Completions token_ids")
    if any(key in (choice.model_extra or {}) for key in COMPACT_LOGPROBS):
        return _with_request_prompt(exchange, prompt_ids), sampled
    logprobs = choice.logprobs
    carried = list(logprobs.tokens or []) if logprobs is not None else []
    if sampled == [] and (choice.text or carried):
        sampled = None
    paired: list[int] = []
    complete = True
    for value in carried:
        found = token_id(value)
        if found is None and value.startswith("token_id:"):
            raise ValueError("Completions logprobs contain an invalid exact token ID")
        if found is None:
            complete = False
        else:
            paired.append(found)
    paired = paired if complete else []
    if sampled is not None and paired and sampled != paired:
        raise ValueError("Response token IDs disagree with completion logprobs")
    selected = sampled if sampled is not None else paired or None
    values = list(logprobs.token_logprobs or []) if logprobs is not None else []
    if selected is not None and values and len(values) != len(selected):
        raise ValueError("Completions token IDs and logprobs differ in length")
    return _with_request_prompt(exchange, prompt_ids), selected


def _with_request_prompt(
    exchange: CompletionsExchange, prompt_ids: list[int] | None
) -> list[int] | None:
    """The served prompt ids, else the request's prompt where it is one list of token ids."""
    request_prompt = exchange.request.get("prompt")
    if prompt_ids is None and isinstance(request_prompt, list):
        try:
            return token_ids(request_prompt, "Completions request prompt")
        except ValueError:
            return None
    return prompt_ids
