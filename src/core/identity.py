"""Run identities and the one rule for names that become path segments."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import attrs

from .errors import InvalidNameError

_SAFE_SEGMENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")
MAX_NAME_LENGTH = 128


def validate_name(value: object, what: str = "name") -> str:
    """Return `value` if it is a safe path segment, else raise InvalidNameError naming it.

    Safe: 1-128 characters of ASCII letters, digits, `_`, `-` and `.`, not starting with
    `.` or `-` (so no `..`, no hidden files, no option-like names), no slash, no control
    character. `project`, `name` and `split` all pass through here.
    """
    if not isinstance(value, str):
        raise InvalidNameError(f"{what} must be a string, got {type(value).__name__}: {value!r}")
    if not value:
        raise InvalidNameError(f"{what} must not be empty")
    if len(value) > MAX_NAME_LENGTH:
        raise InvalidNameError(
            f"{what} is {len(value)} characters long; at most {MAX_NAME_LENGTH} are allowed"
        )
    if _SAFE_SEGMENT.fullmatch(value) is None:
        raise InvalidNameError(
            f"{what} {value!r} is not a safe path segment: use letters, digits, '_', '-' and "
            "'.', not starting with '.' or '-' (no slashes, '..', spaces or control characters)"
        )
    return value


def _check_name(what: str) -> Any:
    def check(_instance: object, _attribute: object, value: object) -> None:
        validate_name(value, what)

    return check


@attrs.frozen
class RunRef:
    """Who a run is: `{project}/{name}`. The key every store, history and backend uses."""

    project: str = attrs.field(validator=_check_name("project"))
    name: str = attrs.field(validator=_check_name("name"))

    def __str__(self) -> str:
        return f"{self.project}/{self.name}"

    def inference_name(self, step: int | None = None) -> str:
        """`{name}` for the latest step, `{name}@{step}` for one step (`step_name`)."""
        return step_name(self.name, step)


def step_name(served: str, step: int | None = None) -> str:
    """How a served model is named: `served` for its latest step, `{served}@{step}` for one."""
    return served if step is None else f"{served}@{step}"


@attrs.frozen
class ModelSpec:
    """What a backend needs to know about a model at `register`; never the frontend object."""

    run: RunRef
    base_model: str | None = None
    trainable: bool = True
    base_path: str = ".art"
    config: Mapping[str, Any] = attrs.field(factory=dict)
    # where a backend that trains elsewhere keeps the run (a training server and its model id)
    remote: Mapping[str, str] | None = None
    # The name inference serves the run under (`{served_as}@{step}`), when it is not the
    # run's own: a model's `name` is its alias, while `run.name` keeps its files apart, so
    # two runs of one name are one name served by two endpoints.
    served_as: str | None = attrs.field(default=None, kw_only=True)

    @property
    def served_name(self) -> str:
        return self.served_as if self.served_as is not None else self.run.name

    def to_json(self) -> dict[str, Any]:
        data = {
            "project": self.run.project,
            "name": self.run.name,
            "base_model": self.base_model,
            "trainable": self.trainable,
            "config": dict(self.config),
        }
        if self.remote is not None:
            data["remote"] = dict(self.remote)
        return data
