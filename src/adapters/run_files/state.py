"""JsonRunState: `state.json` in the run directory, where ART keeps a run's state too.

An update holds an exclusive `flock` on `state.json.lock` while it reads, changes and
replaces the file (temp file, fsync, rename), so concurrent read-modify-writes from several
processes serialize and none is lost; a reader needs no lock, since the rename makes each
version appear whole. The JSON is checked before anything is written: no NaN or infinity
(not JSON), no values JSON cannot hold.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...core.errors import CorruptDataError, InvalidInputError
from ...core.identity import RunRef
from ..files import atomic_write_bytes, exclusive_lock
from ..layout import STATE, RunLayout

if TYPE_CHECKING:
    from ...ports.trajectory_store import RunStateStore, StateChange

STATE_FILE = STATE
LOCK_SUFFIX = ".lock"


class JsonRunState:
    """The state at `{root}/{project}/models/{name}/state.json`; holds nothing open."""

    def __init__(self, root: str) -> None:
        self._root = Path(root)

    def path(self, run: RunRef) -> Path:
        return RunLayout.of(self._root, run).state

    def read(self, run: RunRef) -> dict[str, Any] | None:
        return _load(self.path(run))

    def update(self, run: RunRef, change: StateChange) -> dict[str, Any]:
        path = self.path(run)
        path.parent.mkdir(parents=True, exist_ok=True)
        with exclusive_lock(path.with_name(STATE_FILE + LOCK_SUFFIX)):
            state = change(_load(path))
            atomic_write_bytes(path, encode_state(state))
        return state


def encode_state(state: object) -> bytes:
    """The file's bytes (indented, as ART writes it), or InvalidInputError naming the problem."""
    if not isinstance(state, dict):
        raise InvalidInputError(f"a run's state must be a dict, got {type(state).__name__}")
    bad_keys = _non_string_keys(state)
    if bad_keys:
        raise InvalidInputError(
            f"the run's state must be plain JSON: key {bad_keys[0]!r} is not a string (JSON "
            "would turn it into one, and it would read back different)"
        )
    try:
        text = json.dumps(state, indent=2, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(
            f"the run's state must be plain JSON (dicts with string keys, lists, strings, "
            f"finite numbers, booleans, None): {exc}"
        ) from exc
    return (text + "\n").encode()


def _non_string_keys(value: object) -> list[object]:
    """Every dict key below `value` that is not a string (None included)."""
    if isinstance(value, dict):
        return [
            found
            for key, item in value.items()
            for found in ([] if isinstance(key, str) else [key]) + _non_string_keys(item)
        ]
    if isinstance(value, list | tuple):
        return [found for item in value for found in _non_string_keys(item)]
    return []


def _load(path: Path) -> dict[str, Any] | None:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        state = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CorruptDataError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(state, dict):
        raise CorruptDataError(f"{path} holds a {type(state).__name__}, not a JSON object")
    return state


if TYPE_CHECKING:
    _fits: type[RunStateStore] = JsonRunState
