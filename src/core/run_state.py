"""Per-run JSON state for training scripts: ART's `read_state`, `overwrite_state`,
`merge_state` and (deprecated there too) `write_state`, on any model."""

from __future__ import annotations

import copy
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .errors import InvalidInputError
from .identity import RunRef

if TYPE_CHECKING:
    from ..ports.trajectory_store import RunStateStore


def deep_merge(base: Mapping[str, Any], updates: Mapping[str, Any]) -> dict[str, Any]:
    """`updates` over `base`: nested mappings merge key by key, anything else replaces. The
    result shares nothing mutable with `updates` (nested values are copied)."""
    merged = dict(base)
    for key, value in updates.items():
        old = merged.get(key)
        if isinstance(value, Mapping):
            merged[key] = deep_merge(old if isinstance(old, Mapping) else {}, value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _as_dict(state: object, call: str) -> dict[str, Any]:
    if not isinstance(state, dict):
        raise InvalidInputError(f"{call} takes a dict, got {type(state).__name__}")
    return state


class RunStateMixin:
    """The state methods; the model supplies `run` and its `RunStateStore`.

    Every change is one atomic read-modify-write in the store, so a trainer and an evaluator
    merging different keys into one run's state at the same time both keep theirs."""

    run: RunRef
    _state_store: RunStateStore | None

    def _states(self) -> RunStateStore:
        if self._state_store is None:
            raise InvalidInputError(
                f"model {self.run} was built without a state store; construct it through "
                "arthex.Model / arthex.TrainableModel, or pass state=JsonRunState(base_path)"
            )
        return self._state_store

    def read_state(self) -> dict[str, Any] | None:
        """The run's state as last stored, or None when none was ever written."""
        return self._states().read(self.run)

    def overwrite_state(self, state: dict[str, Any]) -> None:
        """Replace the whole state (prefer `merge_state` unless that is what you mean)."""
        new = copy.deepcopy(_as_dict(state, "overwrite_state"))
        self._states().update(self.run, lambda _current: new)

    def merge_state(self, state: dict[str, Any]) -> dict[str, Any]:
        """Deep-merge `state` into the stored state and return the result."""
        updates = _as_dict(state, "merge_state")
        return self._states().update(self.run, lambda current: deep_merge(current or {}, updates))

    def write_state(self, state: dict[str, Any]) -> None:
        """Deprecated, as in ART: it overwrites; say `overwrite_state` or `merge_state`."""
        warnings.warn(
            "write_state() is deprecated; use overwrite_state() or merge_state()",
            DeprecationWarning,
            stacklevel=2,
        )
        self.overwrite_state(state)
