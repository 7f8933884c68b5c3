"""A trajectory's chat completions as ART's `ChatCompletionsHistory` objects: one per branch of
the conversations the recorded calls hold, each message with its source (the request item or
the choice it came from), as ART 0.5.23's `Trajectory.chat_completions_histories()` builds them.

How calls become branches: calls are taken per model, in the order they started. A call
continues the longest branch (with the same tools and chat template) whose messages its
request repeats; each of its choices then ends a branch of its own. A call whose request is a
prefix of a branch (a regeneration) forks from it. A call continues a branch only where the
served tokens agree (its prompt's tokens start with the branch's last prompt and reply and hold
every reasoning span sampled on it; a tool call cut at the token limit is never continued);
otherwise it starts a new branch, its messages keeping the earlier branch's sources where the
reply's tokens are still there. Reasoning fields are left out of the comparison of messages
unless `reconcile_text_equivalent_tokenizations` is set, which also ignores the tokens.

A trajectory without recorded calls gives one history per conversation (its main one, then its
additional histories), every source None.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any, TypeAlias, cast

import attrs
from openai.types.chat import ChatCompletionToolParam
from openai.types.chat.chat_completion import Choice
from pydantic import TypeAdapter

from ..core.chat_types import MessagesAndChoices
from ..core.exchanges import ChatCompletionsExchange
from ..core.trajectories import Trajectory
from .art_trajectories import ChatCompletionsHistory, ChatCompletionsMessageSource, get_messages
from .history_branches import Branch, BranchTree, Output, by_model, one
from .served_tokens import contains, extra, is_prefix, keeps_reply_tail, sampled_ids, token_ids

_TOOLS: TypeAdapter[list[ChatCompletionToolParam] | None] = TypeAdapter(
    list[ChatCompletionToolParam] | None
)
_TEMPLATE_KWARGS: TypeAdapter[dict[str, object] | None] = TypeAdapter(dict[str, object] | None)
_PROTOCOL = "Chat Completions"

Message: TypeAlias = dict[str, Any]
Source: TypeAlias = ChatCompletionsMessageSource | None
Tokens: TypeAlias = tuple[list[int] | None, list[int] | None]


@attrs.frozen
class _Context:
    """What a conversation is rendered with besides its messages."""

    tools: list[Any] | None
    template: object
    kwargs: dict[str, object] | None


def chat_completions_histories(
    trajectory: Trajectory,
    *,
    model: str | None = None,
    reconcile_text_equivalent_tokenizations: bool = False,
) -> list[ChatCompletionsHistory]:
    """Every chat history of the trajectory: per model (in the order the models first
    answered), its branches in the order they started. `model` selects by served name, exactly
    where one matches, else as a shell pattern (`agent@*`)."""
    if not trajectory.exchanges:
        conversations = [(trajectory.messages_and_choices, trajectory.tools)] + [
            (history.messages_and_choices, history.tools)
            for history in trajectory.additional_histories
        ]
        return [
            ChatCompletionsHistory(
                model=model,
                messages=[dict(m) for m in get_messages(cast(MessagesAndChoices, items))],
                message_sources=[None] * len(items),
                tools=copy.deepcopy(tools),
            )
            for items, tools in conversations
        ]
    reconcile = reconcile_text_equivalent_tokenizations
    histories: list[ChatCompletionsHistory] = []
    for served, exchanges in by_model(trajectory.exchanges.chat_completions, model, _PROTOCOL):
        branches = _Branches(reconcile)
        for sequence, exchange in enumerate(exchanges):
            branches.add(sequence, exchange)
        for branch in branches.tree.ordered():
            context = branch.context
            assert isinstance(context, _Context)
            histories.append(
                ChatCompletionsHistory(
                    model=served,
                    messages=copy.deepcopy(branch.items),
                    message_sources=list(branch.sources),
                    tools=copy.deepcopy(context.tools),
                    chat_template=_template(context.template),
                    chat_template_kwargs=copy.deepcopy(context.kwargs),
                )
            )
    return histories


def chat_completions_history(
    trajectory: Trajectory,
    *,
    model: str | None = None,
    reconcile_text_equivalent_tokenizations: bool = False,
) -> ChatCompletionsHistory:
    """The trajectory's one chat history; more than one (several models or branches) is an
    error saying so."""
    histories = chat_completions_histories(
        trajectory,
        model=model,
        reconcile_text_equivalent_tokenizations=reconcile_text_equivalent_tokenizations,
    )
    found: ChatCompletionsHistory = one(histories, _PROTOCOL, model)
    return found


def normalize_chat_message(message: Mapping[str, object]) -> dict[str, object]:
    """A chat message in the one form histories compare and keep: no `annotations`, reasoning
    under `reasoning`, an assistant's missing content as "", no other null content, no empty
    `tool_calls`."""
    data = copy.deepcopy(dict(message))
    data.pop("annotations", None)
    if data.get("reasoning_content") is not None and not data.get("reasoning"):
        data["reasoning"] = data.pop("reasoning_content")
    elif data.get("reasoning_content") == data.get("reasoning"):
        data.pop("reasoning_content", None)
    if data.get("role") == "assistant" and data.get("content") is None:
        data["content"] = ""
    elif data.get("content") is None:
        data.pop("content", None)
    if data.get("tool_calls") == []:
        del data["tool_calls"]
    return data


def _template(value: object) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise ValueError(f"a request's chat_template is a string; got {value!r}")


def _key(message: Mapping[str, object], *, visible_only: bool) -> str:
    data = normalize_chat_message(message)
    if visible_only:
        data.pop("reasoning", None)
        data.pop("reasoning_content", None)
    return json.dumps(data, sort_keys=True, default=str)


def _choices(exchange: ChatCompletionsExchange) -> list[Choice]:
    choices = exchange.response.choices
    if not choices:
        raise ValueError(f"{_PROTOCOL} response contains no choices")
    indices = [choice.index for choice in choices]
    if any(not isinstance(i, int) or isinstance(i, bool) or i < 0 for i in indices):
        raise ValueError(f"{_PROTOCOL} choice indices must be non-negative integers")
    if len(set(indices)) != len(indices):
        raise ValueError(f"{_PROTOCOL} response contains duplicate choice indices")
    return sorted(choices, key=lambda choice: choice.index)


class _Branches:
    """The branches of one model's calls, grown call by call."""

    def __init__(self, reconcile: bool) -> None:
        self.tree = BranchTree()
        self.reconcile = reconcile
        self._tokens: dict[tuple[int, int], Tokens] = {}

    def add(self, sequence: int, exchange: ChatCompletionsExchange) -> None:
        request = exchange.request
        context = _Context(
            tools=_TOOLS.validate_python(request.get("tools")),
            template=request.get("chat_template"),
            kwargs=_TEMPLATE_KWARGS.validate_python(request.get("chat_template_kwargs")),
        )
        sent = request.get("messages", [])
        if not isinstance(sent, list) or not all(isinstance(m, Mapping) for m in sent):
            raise ValueError(f"a {_PROTOCOL} request's messages are a list of objects")
        prompt = [normalize_chat_message(m) for m in sent]
        visible = not self.reconcile
        keys = [_key(m, visible_only=visible) for m in prompt]
        choices = _choices(exchange)
        prompt_ids, _ = self._generation(exchange, choices[0].index)
        size = len(prompt)

        def follows(branch: Branch) -> bool:
            return self._follows_exactly(branch, prompt_ids, size)

        def continues(branch: Branch) -> bool:
            return not self._hit_token_limit(branch, size) and (
                self.reconcile
                or (self._keeps_reasoning(branch, prompt_ids, size) and follows(branch))
            )

        def shares_sources(branch: Branch) -> bool:
            return (
                self.reconcile
                or follows(branch)
                or self._keeps_sampled_suffix(branch, prompt_ids, size)
            )

        prompt_sources = self.tree.prompt_sources(
            keys,
            [ChatCompletionsMessageSource(exchange=exchange, request_index=i) for i in range(size)],
            shares_sources,
        )
        outputs = []
        for choice in choices:
            reply = normalize_chat_message(
                choice.message.model_dump(mode="python", exclude_none=True)
            )
            source = ChatCompletionsMessageSource(exchange=exchange, choice_index=choice.index)
            outputs.append(
                Output(choice.index, [reply], [source], [_key(reply, visible_only=visible)])
            )
        self.tree.extend(
            prompt, prompt_sources, keys, outputs, context, sequence, exchange.start_time, continues
        )

    # -- what the served tokens say ------------------------------------------------------------

    def _generation(self, exchange: ChatCompletionsExchange, choice_index: int) -> Tokens:
        key = (id(exchange), choice_index)
        if key not in self._tokens:
            choice = next((c for c in exchange.response.choices if c.index == choice_index), None)
            if choice is None:
                raise ValueError("Chat choice source index is out of bounds")
            prompt = extra(choice, "prompt_token_ids")
            if prompt is None:
                prompt = (exchange.response.model_extra or {}).get("prompt_token_ids")
            prompt_ids = token_ids(prompt, "Chat Completions prompt_token_ids")
            self._tokens[key] = (prompt_ids or None, sampled_ids(choice))
        return self._tokens[key]

    def _last_sampled(self, branch: Branch, size: int) -> ChatCompletionsMessageSource | None:
        return next(
            (
                s
                for s in reversed(branch.sources[:size])
                if s is not None
                and isinstance(s.exchange, ChatCompletionsExchange)
                and s.choice_index is not None
            ),
            None,
        )

    def _sampled(self, source: ChatCompletionsMessageSource) -> Tokens:
        assert isinstance(source.exchange, ChatCompletionsExchange)
        assert source.choice_index is not None
        return self._generation(source.exchange, source.choice_index)

    def _follows_exactly(self, branch: Branch, prompt_ids: list[int] | None, size: int) -> bool:
        """The prompt's tokens start with the branch's last sampled prompt and reply (true
        where tokens are unknown)."""
        if prompt_ids is None:
            return True
        source = self._last_sampled(branch, size)
        if source is None:
            return True
        before, reply = self._sampled(source)
        return before is None or reply is None or is_prefix([*before, *reply], prompt_ids)

    def _keeps_reasoning(self, branch: Branch, prompt_ids: list[int] | None, size: int) -> bool:
        """Every reasoning span the model sampled on the branch is still in the prompt's
        tokens (a template that drops past reasoning starts a new sequence)."""
        if prompt_ids is None:
            return True
        for message, source in zip(branch.items[:size], branch.sources[:size], strict=True):
            reasoning = message.get("reasoning") or message.get("reasoning_content")
            if (
                not reasoning
                or source is None
                or source.choice_index is None
                or not isinstance(source.exchange, ChatCompletionsExchange)
            ):
                continue
            _, reply = self._sampled(source)
            if reply and not contains(prompt_ids, reply):
                return False
        return True

    def _keeps_sampled_suffix(
        self, branch: Branch, prompt_ids: list[int] | None, size: int
    ) -> bool:
        source = self._last_sampled(branch, size)
        if source is None:
            return False
        before, reply = self._sampled(source)
        return keeps_reply_tail(before, reply, prompt_ids)

    def _hit_token_limit(self, branch: Branch, size: int) -> bool:
        """The branch's last reply is tool calls cut off at the request's token limit."""
        source = self._last_sampled(branch, size)
        if source is None:
            return False
        exchange = source.exchange
        assert isinstance(exchange, ChatCompletionsExchange)
        choice = next(
            (c for c in exchange.response.choices if c.index == source.choice_index), None
        )
        if choice is None or choice.finish_reason != "tool_calls" or not choice.message.tool_calls:
            return False
        limit = exchange.request.get("max_completion_tokens")
        if limit is None:
            limit = exchange.request.get("max_tokens")
        if not isinstance(limit, int) or isinstance(limit, bool) or limit <= 0:
            return False
        _, reply = self._sampled(source)
        return reply is not None and len(reply) >= limit
