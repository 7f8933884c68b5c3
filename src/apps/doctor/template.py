"""The base model's chat template against what training does with it.

A conversation with a system prompt, a tool call, its result and a final answer is rendered
by the servers' own `ChatTokenizer`. Each assistant turn is then made into the Choice the
inference server would return for it: its prompt the template's rendering of the turns
before it with the generation prompt, its sampled tokens what the template's rendering of
the turn adds after that. Those Choices go through the trainer's own `build_sequences`
(adapters/local/packing.py), and the tokens it marks trainable must be exactly the sampled
ones, spell the answer and the tool call, and end in a token the engine stops at. The SFT
path's `conversation_sequences` must find the same assistant tokens.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any

from ...core.errors import InvalidInputError
from .check import Check, fail, ok, warn

SYSTEM = "You are a helpful assistant."
QUESTION = "What is the weather in Paris?"
CALL_ARGUMENTS = '{"city": "Paris"}'
TOOL_RESULT = "sunny, 21 degrees"
ANSWER = "It is sunny in Paris."
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


def conversation() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": QUESTION},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_0",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": CALL_ARGUMENTS},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_0", "content": TOOL_RESULT},
        {"role": "assistant", "content": ANSWER},
    ]


def local_model_dir(base_model: str) -> Path:
    """The folder holding `base_model`'s files: the folder itself, or a hub id's snapshot in
    the Hugging Face cache. Nothing is downloaded: InvalidInputError in one line otherwise."""
    if os.path.isdir(base_model):
        return Path(base_model)
    if not _HUB_ID.match(base_model):
        raise InvalidInputError(f"base model {base_model!r} is not a folder here nor a hub id")
    try:
        from huggingface_hub import constants, try_to_load_from_cache
    except ImportError:
        raise InvalidInputError(
            f"base model {base_model!r} is not a folder here, and huggingface_hub is not "
            "installed to look in the cache: pip install 'arthex[local]'"
        ) from None
    cached = try_to_load_from_cache(base_model, "config.json")
    if isinstance(cached, str):
        return Path(cached).parent
    raise InvalidInputError(
        f"{base_model!r} is neither a folder here nor in the Hugging Face cache "
        f"({constants.HF_HUB_CACHE}), and doctor downloads nothing"
    )


def check_template(model_dir: Path) -> Check:
    """One line on the chat template; see the module docstring."""
    try:
        from ...adapters.inference.chat import ChatTokenizer
    except ImportError:
        return fail("template", "transformers is not installed", "pip install 'arthex[local]'")
    try:
        chat = ChatTokenizer.load(str(model_dir))
    except InvalidInputError as error:
        return fail("template", _first(error), "use a chat model, or save a chat template")
    except Exception as error:
        return fail(
            "template",
            f"cannot load the tokenizer of {model_dir}: {_first(error)}",
            "pass a model folder with its tokenizer files",
        )
    chat.add_eos_token_ids(_generation_eos(model_dir))
    try:
        return _check(chat)
    except InvalidInputError as error:
        return fail(
            "template",
            _first(error),
            "fix the chat template (tokenizer_config.json or chat_template.jinja)",
        )


def _check(chat: Any) -> Check:
    from openai.types.chat.chat_completion import Choice

    from ...adapters.inference.sft_tokens import conversation_sequences
    from ...adapters.local.packing import build_sequences
    from ...core.config import TrainConfig
    from ...core.conversations import Conversation
    from ...core.trajectories import Trajectory, TrajectoryGroup

    messages, tools = conversation(), [TOOL]
    chat.render(messages, tools, add_generation_prompt=False)  # renders at all
    turns = [i for i, message in enumerate(messages) if message["role"] == "assistant"]
    sampled: list[list[int]] = []
    items: list[Any] = []
    last = 0
    for turn in turns:
        prompt = chat.render(messages[:turn], tools, add_generation_prompt=True)
        through = chat.render(messages[: turn + 1], tools, add_generation_prompt=False)
        if through[: len(prompt)] != prompt or len(through) <= len(prompt):
            return fail(
                "template",
                f"assistant message {turn} does not render as a continuation of its prompt "
                "(the generation prompt), so its tokens cannot be told apart",
                "fix the chat template",
            )
        tokens = _until_stop(through[len(prompt) :], chat.eos_token_ids)
        sampled.append(tokens)
        items.extend(messages[last:turn])
        last = turn + 1
        items.append(_choice(Choice, messages[turn], prompt, tokens))
    group = TrajectoryGroup(
        [Trajectory(messages_and_choices=items, reward=r, tools=tools) for r in (0.0, 1.0)]
    )
    sequences, _ = build_sequences([group], TrainConfig())
    mine = [s for s in sequences if s.trajectory_index == 0]
    trained = [t for s in mine for t, c in zip(s.tokens, s.completion) if c]
    expected = [t for tokens in sampled for t in tokens]
    if not trained:
        return fail(
            "template",
            "no assistant token is trainable (the mask is all zero)",
            "fix the chat template",
        )
    if trained != expected:
        return fail(
            "template",
            f"the trainer marks {len(trained)} tokens trainable, not the {len(expected)} sampled",
            "report this with the model's chat template",
        )
    call_text, answer_text = (chat.decode_raw(tokens) for tokens in sampled)
    if "get_weather" not in call_text:
        return fail(
            "template",
            f"the assistant's tool call renders as {call_text!r}: the model would never be "
            "trained to call tools",
            "use a chat template that renders tool_calls",
        )
    if ANSWER not in answer_text:
        return fail(
            "template",
            f"the answer renders as {answer_text!r}, not the sampled text",
            "fix the chat template",
        )
    ends = [tokens[-1] in chat.eos_token_ids for tokens in sampled]
    sft = conversation_sequences(chat, Conversation(tuple(messages), tuple(tools)), "all", "doctor")
    targets = sum(s.num_targets for s in sft)
    summary = (
        f"system, tool call, tool result and answer render; {len(trained)} assistant tokens "
        f"trainable, matching the sampled text; SFT targets {targets} tokens"
    )
    if not all(ends):
        return warn(
            "template",
            f"{summary}; but an assistant turn does not end in an end token "
            f"({sorted(chat.eos_token_ids)}), so sampling runs on to max_tokens",
            "add the template's end-of-turn token to generation_config.json's eos_token_id",
        )
    if len(mine) > 1:
        return ok(
            "template",
            f"{summary}; the template re-renders earlier turns, so each turn trains as its own "
            "sequence (correct, with the prompt repeated)",
        )
    return ok("template", summary)


def _until_stop(tokens: list[int], stops: frozenset[int]) -> list[int]:
    """What the engine samples: the turn's tokens through the first end token."""
    for index, token in enumerate(tokens):
        if token in stops:
            return tokens[: index + 1]
    return tokens


def _choice(choice_type: Any, message: dict[str, Any], prompt: list[int], tokens: list[int]) -> Any:
    return choice_type.model_validate(
        {
            "index": 0,
            "finish_reason": "stop",
            "message": {k: v for k, v in message.items() if k != "content" or v},
            "logprobs": {
                "content": [
                    {"token": str(t), "logprob": -math.log(2), "bytes": None, "top_logprobs": []}
                    for t in tokens
                ]
            },
            "prompt_token_ids": prompt,
            "token_ids": tokens,
        }
    )


def _generation_eos(model_dir: Path) -> object:
    try:
        return json.loads((model_dir / "generation_config.json").read_text()).get("eos_token_id")
    except (OSError, ValueError, AttributeError):
        return None


def _first(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return text or type(error).__name__
