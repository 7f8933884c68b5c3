"""The branches of one model's recorded calls, grown call by call: the tree behind ART's
derived histories (`utils.art_histories`), the same for every API.

A call's request (its prompt items) continues the longest branch with the same context
(tools, system prompt, chat template) whose items it starts with and that the caller's
`continues` accepts; each of the call's outputs (a choice) then ends a branch of its own, in
its place. A call whose prompt is a start of a branch (a regeneration) forks from the earliest
such branch, which stays. A call that continues nothing starts a branch. Each prompt item keeps
the source it had in the longest earlier branch the prompt repeats (compared by key), where the
caller's `shares_sources` accepts that branch; else its source is the request's own item.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from fnmatch import fnmatchcase
from typing import Any, Protocol, TypeVar

import attrs

from .served_tokens import is_prefix


class Recorded(Protocol):
    """A recorded call, as far as choosing and ordering calls goes."""

    @property
    def start_time(self) -> datetime: ...

    @property
    def end_time(self) -> datetime: ...

    @property
    def model(self) -> str | None: ...


RecordedT = TypeVar("RecordedT", bound=Recorded)


def matches(name: str | None, pattern: str) -> bool:
    """A served name is the pattern, or matches it as a case-sensitive shell pattern."""
    return name is not None and (name == pattern or fnmatchcase(name, pattern))


def by_model(
    exchanges: Sequence[RecordedT], model: str | None, protocol: str
) -> list[tuple[str, list[RecordedT]]]:
    """The calls `model` selects (all for None; the calls of that served name where one has
    it, else those whose name matches it as a shell pattern), per served name in the order
    the names first answered, each name's calls in the order they started."""
    exact = model is not None and any(e.model == model for e in exchanges)
    selected = [
        e
        for e in exchanges
        if model is None or (e.model == model if exact else matches(e.model, model))
    ]
    if not selected:
        suffix = f" for model {model!r}" if model is not None else ""
        raise ValueError(f"Trajectory contains no {protocol} exchanges{suffix}")
    grouped: dict[str, list[RecordedT]] = {}
    for exchange in sorted(selected, key=lambda e: (e.start_time, e.end_time)):
        if exchange.model is None:
            raise ValueError(f"Every {protocol} exchange must identify its model")
        grouped.setdefault(exchange.model, []).append(exchange)
    return list(grouped.items())


def one(histories: Sequence[Any], protocol: str, model: str | None) -> Any:
    """The one history a trajectory must hold."""
    if model is None and len({history.model for history in histories}) > 1:
        raise ValueError(
            f"{protocol} history requires exactly one model; pass model= to select one"
        )
    if len(histories) != 1:
        raise ValueError(f"{protocol} history requires exactly one history; found {len(histories)}")
    return histories[0]


@attrs.define
class Branch:
    """One sequence: its items, each item's source (None: unknown) and comparison key, the
    context it was rendered with, where it sits among the calls (`order`: the first call's
    sequence number, then each choice index), when its first call started, and the call that
    set its context (for a system prompt's source)."""

    items: list[Any]
    sources: list[Any]
    keys: list[str]
    context: object
    order: tuple[int, ...]
    first_time: datetime
    context_source: object = None


@attrs.frozen
class Output:
    """One output of a call: its choice index, its items (a message, or sampled tokens),
    their sources and their keys."""

    index: int
    items: list[Any]
    sources: list[Any]
    keys: list[str]


class BranchTree:
    """The branches of one model's calls."""

    def __init__(self) -> None:
        self.branches: list[Branch] = []

    def ordered(self) -> list[Branch]:
        """The branches in the order they started (then by call and choice)."""
        return sorted(self.branches, key=lambda b: (b.first_time, b.order))

    def prompt_sources(
        self,
        keys: Sequence[str],
        defaults: list[Any],
        shares_sources: Callable[[Branch], bool],
    ) -> list[Any]:
        """Each prompt item's source: those of the longest earlier branch the prompt repeats
        (key by key), then the request's own items."""
        parents = [
            b
            for b in self.branches
            if len(b.items) < len(keys)
            and shares_sources(b)
            and list(keys[: len(b.keys)]) == b.keys
        ]
        if not parents:
            return defaults
        parent = min(parents, key=lambda b: (-len(b.items), b.order))
        return [*parent.sources, *defaults[len(parent.items) :]]

    def extend(
        self,
        prompt: list[Any],
        prompt_sources: list[Any],
        keys: list[str],
        outputs: list[Output],
        context: object,
        sequence: int,
        start_time: datetime,
        continues: Callable[[Branch], bool],
        context_source: object = None,
    ) -> None:
        """Grow the tree by one call."""
        extended = [
            (i, b)
            for i, b in enumerate(self.branches)
            if b.context == context and is_prefix(b.items, prompt) and continues(b)
        ]
        parent: Branch | None = None
        if extended:
            index, parent = min(extended, key=lambda item: (-len(item[1].items), item[1].order))
            del self.branches[index]
            sources = [*parent.sources, *prompt_sources[len(parent.items) :]]
        else:
            regenerated = [
                b
                for b in self.branches
                if b.context == context and is_prefix(prompt, b.items) and continues(b)
            ]
            if regenerated:
                parent = min(regenerated, key=lambda b: b.order)
                sources = list(parent.sources[: len(prompt)])
            else:
                sources = list(prompt_sources)
        order = parent.order if parent is not None else (sequence,)
        first_time = parent.first_time if parent is not None else start_time
        for output in outputs:
            self.branches.append(
                Branch(
                    items=[*prompt, *output.items],
                    sources=[*sources, *output.sources],
                    keys=[*keys, *output.keys],
                    context=context,
                    order=(*order, output.index),
                    first_time=first_time,
                    context_source=context_source,
                )
            )
