"""What every engine keeps the same way: served names (each bound to its weights), aliases
onto them, and the one tokenizer behind them all."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Generic, TypeVar

from ...core.errors import BackendError, InvalidInputError
from .chat import ChatTokenizer
from .engine import JsonItems, UnknownModelError

W = TypeVar("W")

MAX_SAMPLES_PER_REQUEST = 256


class ServedNames(Generic[W]):
    """Subclasses fill `_served` (name -> weights), `_aliases` (alias -> name) and `_chat`."""

    _served: dict[str, W]
    _aliases: dict[str, str]
    _chat: ChatTokenizer | None
    _closed: bool

    def _admit(self, n: int) -> None:
        """Refuse a sampling request before any work: `n` out of range, or a closed engine."""
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_SAMPLES_PER_REQUEST:
            raise InvalidInputError(f"n must be in 1..{MAX_SAMPLES_PER_REQUEST}, got {n!r}")
        if self._closed:
            raise BackendError(f"the {type(self).__name__} was closed")

    def is_served(self, name: str) -> bool:
        return name in self._served or name in self._aliases

    def served_models(self) -> list[str]:
        return sorted([*self._served, *self._aliases])

    def alias(self, name: str, target: str) -> None:
        """Make `name` serve whatever `target` serves now (e.g. "agent" -> "agent@3")."""
        resolved = self._aliases.get(target, target)
        if resolved not in self._served:
            raise UnknownModelError(target, self.served_models())
        if name in self._served:
            raise InvalidInputError(
                f"{name!r} already serves loaded weights; unload it before using it as an alias"
            )
        if name == resolved:
            raise InvalidInputError(f"{name!r} cannot be an alias of itself")
        self._aliases[name] = resolved

    def render_chat(
        self,
        model: str,
        messages: JsonItems,
        tools: JsonItems | None,
        *,
        template_kwargs: Mapping[str, Any] | None = None,
    ) -> list[int]:
        return self._chat_for(model).render(messages, tools, template_kwargs=template_kwargs)

    def decode(self, model: str, token_ids: Sequence[int]) -> str:
        return self._chat_for(model).decode(token_ids)

    def token_text(self, model: str, token_id: int) -> str:
        return self._chat_for(model).token_text(token_id)

    def _resolve(self, model: str) -> W:
        name = self._aliases.get(model, model)
        if name not in self._served:
            raise UnknownModelError(model, self.served_models())
        return self._served[name]

    def _forget_aliases_of(self, name: str) -> None:
        for alias in [alias for alias, target in self._aliases.items() if target == name]:
            del self._aliases[alias]

    def _chat_for(self, model: str) -> ChatTokenizer:
        self._resolve(model)
        if self._chat is None:
            raise BackendError(f"{type(self).__name__} is not started; await start() first")
        return self._chat
