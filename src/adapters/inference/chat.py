"""The base model's tokenizer as both engines use it: chat rendering, decoding, prompt checks.

Rendering happens here rather than in the engine so the prompt token ids the server returns
are exactly the ids that were sampled from, whichever engine ran them.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from ...core.errors import InvalidInputError, MissingExtraError
from ..hub import resolve_base_model
from .engine import JsonItems


class ChatTokenizer:
    """A Hugging Face tokenizer with a chat template, wrapped for the engines."""

    def __init__(self, tokenizer: Any, *, source: str) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise InvalidInputError(
                f"the tokenizer of {source!r} has no chat template; use a chat/instruct model "
                "or set `tokenizer.chat_template` and save it into the model directory"
            )
        self._tokenizer = tokenizer
        self._token_texts: dict[int, str] = {}
        self.source = source
        self.vocab_size = len(tokenizer)
        eos = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
        self.eos_token_ids: frozenset[int] = frozenset(eos)
        self.pad_token_id: int = next(
            token
            for token in (tokenizer.pad_token_id, tokenizer.eos_token_id, 0)
            if token is not None
        )

    @classmethod
    def load(cls, model: str) -> ChatTokenizer:
        try:
            from transformers import AutoTokenizer
        except ImportError as exc:
            raise MissingExtraError("transformers", "local") from exc
        source = resolve_base_model(model)  # a hub id that cannot be had is refused here, at once
        return cls(AutoTokenizer.from_pretrained(source), source=model)

    def clone(self) -> ChatTokenizer:
        """An independent copy for another thread: a Rust tokenizer used from two threads at
        once can fail with "Already borrowed" when one of them changes its settings."""
        twin = copy.copy(self)
        twin._tokenizer = copy.deepcopy(self._tokenizer)
        twin._token_texts = {}
        return twin

    def add_eos_token_ids(self, token_ids: object) -> None:
        """Add the model's own end tokens (generation_config may list several)."""
        if isinstance(token_ids, int):
            token_ids = [token_ids]
        if isinstance(token_ids, list | tuple | set | frozenset):
            ids = {int(token) for token in token_ids if isinstance(token, int)}
            self.eos_token_ids = self.eos_token_ids | ids

    def render(
        self,
        messages: JsonItems,
        tools: JsonItems | None,
        *,
        add_generation_prompt: bool = True,
        template_kwargs: Mapping[str, Any] | None = None,
    ) -> list[int]:
        """The template's token ids, as the servers sample from them (with the assistant's
        generation prompt) or, for fine-tuning targets, without it. `template_kwargs` are
        the template's own variables (e.g. `enable_thinking`)."""
        if not messages:
            raise InvalidInputError("messages must hold at least one message")
        plain_messages = [dict(message) for message in messages]
        plain_tools = [dict(tool) for tool in tools] if tools else None
        try:
            ids = self._tokenizer.apply_chat_template(
                plain_messages,
                tools=plain_tools,
                add_generation_prompt=add_generation_prompt,
                tokenize=True,
                return_dict=False,
                **dict(template_kwargs or {}),
            )
        except Exception as exc:  # jinja errors, bad shapes: the caller's input, not a crash
            raise InvalidInputError(
                f"the chat template of {self.source!r} could not render these messages: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if ids and isinstance(ids[0], list):  # a batch of one, as some versions return
            ids = ids[0]
        return [int(token) for token in ids]

    @property
    def context_limit(self) -> int | None:
        """The tokenizer's `model_max_length` when it names one (Hugging Face stores a huge
        sentinel when the model's limit is unknown)."""
        limit = getattr(self._tokenizer, "model_max_length", None)
        return limit if isinstance(limit, int) and 0 < limit < 10**7 else None

    def decode(self, token_ids: Sequence[int]) -> str:
        return str(self._tokenizer.decode(list(token_ids), skip_special_tokens=True))

    def decode_raw(self, token_ids: Sequence[int]) -> str:
        return str(self._tokenizer.decode(list(token_ids), skip_special_tokens=False))

    def token_text(self, token_id: int) -> str:
        """One token's own text, remembered: a response with logprobs spells every token, and
        a tokenizer call per token cost more than the rest of the response together."""
        text = self._token_texts.get(token_id)
        if text is None:
            text = self._token_texts[token_id] = self.decode_raw([token_id])
        return text

    def check_prompt(self, prompt_token_ids: Sequence[int], context_length: int) -> list[int]:
        prompt = list(prompt_token_ids)
        if not prompt:
            raise InvalidInputError("the prompt is empty; render at least one message")
        for token in prompt:
            if isinstance(token, bool) or not isinstance(token, int):
                raise InvalidInputError(f"prompt token ids must be integers, got {token!r}")
            if not 0 <= token < self.vocab_size:
                raise InvalidInputError(
                    f"prompt token id {token} is outside the vocabulary (0..{self.vocab_size - 1})"
                )
        if len(prompt) >= context_length:
            raise InvalidInputError(
                f"the prompt has {len(prompt)} tokens but the model's context holds "
                f"{context_length}; shorten the conversation"
            )
        return prompt


def first_stop(text: str, stops: Sequence[str]) -> int | None:
    """Index where the earliest stop string starts in `text`, or None."""
    found = [index for index in (text.find(stop) for stop in stops) if index >= 0]
    return min(found) if found else None
