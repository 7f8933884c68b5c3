"""A trajectory's Anthropic Messages calls as ART's `AnthropicMessagesHistory` objects, as ART
0.5.23's `Trajectory.anthropic_messages_histories()` builds them: the same branch tree as the
chat histories (`utils.history_branches`), a call continuing a branch with the same system
prompt, tools and chat template. Messages are compared without their thinking blocks and
token fields; a call continues a branch only where its served prompt tokens start with the
branch's last prompt and reply (unless `reconcile_text_equivalent_tokenizations`), and keeps
that branch's sources where they do or where the reply's tail starts what follows.

A trajectory keeps these calls as the JSON it read; each is validated as a `MessagesExchange`
here, and the histories' sources are those validated records.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

import attrs
from pydantic import TypeAdapter

from ..core.trajectories import Trajectory
from .art_trajectories import (
    AnthropicMessagesHistory,
    AnthropicMessageSource,
    MessagesExchange,
)
from .history_branches import Branch, BranchTree, Output, by_model, one
from .served_tokens import is_prefix, keeps_reply_tail, token_ids

_PROTOCOL = "Anthropic Messages"
_TEMPLATE_KWARGS: TypeAdapter[dict[str, object] | None] = TypeAdapter(dict[str, object] | None)
_THINKING = {"thinking", "redacted_thinking"}
Tokens = tuple[list[int] | None, list[int] | None]


@attrs.frozen
class _Context:
    system: object
    tools: object
    template: object
    kwargs: dict[str, object] | None


def anthropic_messages_histories(
    trajectory: Trajectory,
    *,
    model: str | None = None,
    reconcile_text_equivalent_tokenizations: bool = False,
) -> list[AnthropicMessagesHistory]:
    """Every Anthropic Messages history of the trajectory, per model, branches in the order
    they started; `model` selects as for the chat histories."""
    reconcile = reconcile_text_equivalent_tokenizations
    records = [MessagesExchange.model_validate(r) for r in trajectory.exchanges.messages]
    histories: list[AnthropicMessagesHistory] = []
    for served, exchanges in by_model(records, model, _PROTOCOL):
        tree = BranchTree()
        tokens: dict[int, Tokens] = {}
        for sequence, exchange in enumerate(exchanges):
            _add(tree, tokens, sequence, exchange, reconcile)
        for branch in tree.ordered():
            context = branch.context
            assert isinstance(context, _Context)
            system_source = branch.context_source
            assert system_source is None or isinstance(system_source, MessagesExchange)
            histories.append(
                AnthropicMessagesHistory(
                    model=served,
                    messages=copy.deepcopy(branch.items),
                    message_sources=list(branch.sources),
                    system=copy.deepcopy(context.system),
                    system_source=system_source,
                    tools=copy.deepcopy(context.tools),
                    chat_template=context.template,
                    chat_template_kwargs=copy.deepcopy(context.kwargs),
                )
            )
    return histories


def anthropic_messages_history(
    trajectory: Trajectory,
    *,
    model: str | None = None,
    reconcile_text_equivalent_tokenizations: bool = False,
) -> AnthropicMessagesHistory:
    """The trajectory's one Anthropic Messages history."""
    histories = anthropic_messages_histories(
        trajectory,
        model=model,
        reconcile_text_equivalent_tokenizations=reconcile_text_equivalent_tokenizations,
    )
    found: AnthropicMessagesHistory = one(histories, _PROTOCOL, model)
    return found


def _add(
    tree: BranchTree,
    tokens: dict[int, Tokens],
    sequence: int,
    exchange: MessagesExchange,
    reconcile: bool,
) -> None:
    request = exchange.request
    prompt = _prompt(request.get("messages", []))
    prompt_ids, _ = _generation(exchange, tokens)
    size = len(prompt)

    def last_reply(branch: Branch) -> Tokens | None:
        source = next(
            (
                s
                for s in reversed(branch.sources[:size])
                if s is not None and s.request_index is None
            ),
            None,
        )
        return None if source is None else _generation(source.exchange, tokens)

    def continues(branch: Branch) -> bool:
        if reconcile or prompt_ids is None:
            return True
        found = last_reply(branch)
        if found is None:
            return True
        before, reply = found
        return before is None or reply is None or is_prefix([*before, *reply], prompt_ids)

    def shares_sources(branch: Branch) -> bool:
        found = last_reply(branch)
        return continues(branch) or (
            found is not None and keeps_reply_tail(found[0], found[1], prompt_ids)
        )

    keys = [_key(message) for message in prompt]
    prompt_sources = tree.prompt_sources(
        keys,
        [AnthropicMessageSource(exchange=exchange, request_index=i) for i in range(size)],
        shares_sources,
    )
    reply = {
        "role": "assistant",
        "content": [_without_nulls(block) for block in exchange.response["content"]],
    }
    system = request.get("system")
    if system is not None and not isinstance(system, str | list):
        raise ValueError(f"an Anthropic request's system is text or a list; got {system!r}")
    tools = request.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise ValueError(f"an Anthropic request's tools are a list; got {tools!r}")
    context = _Context(
        system=system,
        tools=tools,
        template=request.get("chat_template"),
        kwargs=_TEMPLATE_KWARGS.validate_python(request.get("chat_template_kwargs")),
    )
    tree.extend(
        prompt,
        prompt_sources,
        keys,
        [Output(0, [reply], [AnthropicMessageSource(exchange=exchange)], [_key(reply)])],
        context,
        sequence,
        exchange.start_time,
        continues,
        context_source=exchange if system is not None else None,
    )


def _prompt(value: object) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise ValueError("Anthropic messages must be a list")
    messages = []
    for message in value:
        if not isinstance(message, Mapping):
            raise ValueError("Anthropic messages must be JSON objects")
        content = message.get("content")
        if not isinstance(content, str | list):
            raise ValueError("Anthropic message content must be text or a list")
        if isinstance(content, list) and not all(isinstance(b, Mapping) for b in content):
            raise ValueError("Anthropic message content blocks must be JSON objects")
        messages.append(copy.deepcopy(dict(message)))
    return messages


def _key(message: Mapping[str, Any]) -> str:
    """A message as compared across calls: text content as one text block, no thinking
    blocks, no token fields."""
    content = message.get("content")
    if isinstance(content, str):
        blocks: list[dict[str, Any]] = [{"type": "text", "text": content}]
    else:
        blocks = []
        for block in content or []:
            data = {k: v for k, v in block.items() if k not in ("token_ids", "logprobs")}
            if data.get("type") not in _THINKING:
                blocks.append(data)
    return json.dumps({**message, "content": blocks}, sort_keys=True, default=str)


def _without_nulls(block: object) -> object:
    if not isinstance(block, Mapping):
        raise ValueError(f"an Anthropic reply's content blocks are objects; got {block!r}")
    return {key: value for key, value in block.items() if value is not None}


def _generation(exchange: MessagesExchange, cache: dict[int, Tokens]) -> Tokens:
    """The served prompt and reply token ids of a call (None: not served)."""
    key = id(exchange)
    if key not in cache:
        response = exchange.response
        prompt = token_ids(response.get("prompt_token_ids"), "Messages prompt_token_ids")
        reply = token_ids(response.get("token_ids"), "Messages token_ids")
        if reply == [] and response.get("content"):
            reply = None
        logprobs = response.get("logprobs") or []
        compact = "compact_logprobs" in response
        if not compact and reply is not None and logprobs and len(logprobs) != len(reply):
            raise ValueError("Messages token IDs and logprobs differ in length")
        cache[key] = (prompt or None, reply)
    return cache[key]
