"""The base models a Tinker server serves, each loaded once, by the name clients give it.

A model is served under one name (what `get_server_capabilities` lists and what a run
records) and may be accepted under aliases too (a folder's absolute path). A training run or
sampler names its base model; `resolve` answers an unknown name with a 400 that lists the
served names, so a client learns what to ask for.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs

from .base_model import BaseModel
from .errors import HttpError


@attrs.frozen
class Served:
    name: str
    base: BaseModel


class ServedModels:
    """name -> BaseModel, with aliases; the order they were added is the order listed."""

    def __init__(self) -> None:
        self._models: dict[str, Served] = {}
        self._names: dict[str, str] = {}  # accepted name or alias -> served name

    def add(self, name: str, base: BaseModel, aliases: Iterable[str] = ()) -> None:
        for accepted in (name, *aliases):
            owner = self._names.get(accepted)
            if owner is not None and owner != name:
                raise ValueError(f"base model name {accepted!r} is served twice")
        self._models[name] = Served(name, base)
        for accepted in (name, *aliases):
            self._names[accepted] = name

    @property
    def names(self) -> list[str]:
        return list(self._models)

    def resolve(self, name: object) -> Served:
        """The served model `name` names, or a 400 naming the served ones."""
        served = self._names.get(name) if isinstance(name, str) else None
        if served is None:
            listed = ", ".join(repr(n) for n in self._models)
            raise HttpError(
                400, f"base model {name!r} is not served by this server; it serves {listed}"
            )
        return self._models[served]

    def base(self, name: str) -> BaseModel:
        return self.resolve(name).base

    def capabilities(self) -> dict[str, Any]:
        """`get_server_capabilities`' answer: every served model with its context length."""
        return {
            "supported_models": [
                {
                    "model_name": served.name,
                    "max_context_length": served.base.context_length,
                    "trainable": True,
                    "sampleable": True,
                }
                for served in self._models.values()
            ]
        }
