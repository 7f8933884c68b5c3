"""ART 0.5.23's trajectory data model and arthex's under `arthex.art.trajectories` build the
same objects from the same JSON (art/trajectory_histories_script.py, one script for both):

- the chat histories ART's `Trajectory.chat_completions_histories()` derives from recorded
  multi-turn calls (tool calls, n=2 choices, a regeneration, a sub-agent with its own tools, a
  template that drops sampled reasoning, a prompt that does not extend the served tokens, a
  tool call cut at the token limit, two models, a legacy trajectory) are arthex's, dump for
  dump, sources included, with and without `reconcile_text_equivalent_tokenizations`, and
  the same selections are refused;
- every history, source and exchange class validates the other library's dumps, the
  Responses, Messages and legacy Completions histories ART derives included, and re-dumps
  them the same; the same malformed values are refused by both.

The token ids are those a chat template would give: a message is `[1, role, *words, 2]`, a
prompt ends with the generation prompt `[1, assistant]`, and a reply is its words and `2`.
"""

from __future__ import annotations

import json
from typing import Any

from ._compare import first_difference
from .art_env import both_outcomes

ROLES = {"system": 3, "user": 4, "assistant": 5, "tool": 6}
SYSTEM = {"role": "system", "content": "You look up weather."}
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "weather",
            "description": "Weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


def words(text: str) -> list[int]:
    return [10 + sum(map(ord, word)) % 4000 for word in text.split()]


def spoken(message: dict[str, Any], *, reasoning: bool = False) -> str:
    """What a message renders to; the template drops reasoning unless asked to keep it."""
    text = message.get("content") or ""
    if reasoning and message.get("reasoning_content"):
        text = f"think {message['reasoning_content']} done {text}"
    for call in message.get("tool_calls") or []:
        text += f" call {call['function']['name']} {call['function']['arguments']}"
    return text


def render(messages: list[dict[str, Any]]) -> list[int]:
    ids: list[int] = []
    for message in messages:
        ids += [1, ROLES[message["role"]], *words(spoken(message)), 2]
    return [*ids, 1, ROLES["assistant"]]


def reply_ids(message: dict[str, Any]) -> list[int]:
    return [*words(spoken(message, reasoning=True)), 2]


def call(
    second: int,
    messages: list[dict[str, Any]],
    *replies: dict[str, Any],
    model: str = "agent@1",
    tools: list[dict[str, Any]] | None = None,
    prompt_ids: list[int] | None = None,
    finish: str = "stop",
    **request: Any,
) -> dict[str, Any]:
    """One recorded call, its choices carrying the token ids a server returns."""
    body: dict[str, Any] = {"model": model, "messages": messages, **request}
    if tools is not None:
        body["tools"] = tools
    choices = [
        {
            "index": index,
            "finish_reason": "tool_calls" if reply.get("tool_calls") else finish,
            "message": {"role": "assistant", **reply},
            "logprobs": None,
            "token_ids": reply_ids(reply),
        }
        for index, reply in enumerate(replies)
    ]
    return {
        "start_time": f"2026-01-01T00:00:{second:02d}Z",
        "end_time": f"2026-01-01T00:00:{second:02d}.500000Z",
        "request": body,
        "response": {
            "id": f"chatcmpl-{second}",
            "object": "chat.completion",
            "created": 1767225600 + second,
            "model": "served",
            "choices": choices,
            "prompt_token_ids": render(messages) if prompt_ids is None else prompt_ids,
        },
    }


def captured(*calls: dict[str, Any], reward: float = 1.0) -> dict[str, Any]:
    return {"exchanges": {"chat_completions": list(calls)}, "reward": reward}


def said(text: str, **fields: Any) -> dict[str, Any]:
    return {"content": text, **fields}


def tool_call(city: str, call_id: str) -> dict[str, Any]:
    arguments = json.dumps({"city": city})
    return {
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": "weather", "arguments": arguments},
            }
        ],
    }


def assistant(reply: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", **reply}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def tool(call_id: str, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def tool_turns() -> dict[str, Any]:
    """A tool-using agent: ask, call the tool, read its answer, answer, follow-up question."""
    first = [SYSTEM, user("Weather in Paris?")]
    lookup = tool_call("Paris", "call_1")
    second = [*first, assistant(lookup), tool("call_1", "sunny 21C")]
    answer = said("It is sunny, 21C.")
    third = [*second, assistant(answer), user("And tomorrow?")]
    return captured(
        call(0, first, lookup, tools=TOOLS),
        call(1, second, answer, tools=TOOLS),
        call(2, third, said("I cannot see tomorrow."), tools=TOOLS),
    )


def branching() -> dict[str, Any]:
    """Two choices of one call, the agent continuing the second; a regeneration of the first
    prompt; and a sub-agent with its own system prompt and no tools."""
    first = [SYSTEM, user("Pick a city.")]
    rome, oslo = said("Rome."), said("Oslo.")
    continued = [*first, assistant(oslo), user("Why?")]
    sub = [{"role": "system", "content": "Summarize."}, user("Oslo is cold.")]
    return captured(
        call(0, first, rome, oslo, tools=TOOLS),
        call(1, continued, said("It is quiet."), tools=TOOLS),
        call(2, first, said("Lima."), tools=TOOLS),
        call(3, sub, said("Cold city.")),
    )


def dropped_reasoning() -> dict[str, Any]:
    """A reasoning model whose template leaves past reasoning out of the next prompt: the
    served tokens no longer hold what was sampled, so the next call starts a new sequence."""
    first = [user("2+2?")]
    thought = said("4.", reasoning_content="two and two")
    second = [*first, assistant(thought), user("Sure?")]
    return captured(call(0, first, thought), call(1, second, said("Yes.")))


def rewritten_tokens() -> dict[str, Any]:
    """The second prompt repeats the messages but its served tokens do not extend the first
    prompt and reply (the client re-rendered them differently)."""
    first = [user("Name a color.")]
    reply = said("Blue.")
    second = [*first, assistant(reply), user("Another?")]
    return captured(
        call(0, first, reply),
        call(1, second, said("Red."), prompt_ids=[1, 4, 99, 2, 1, 5]),
    )


def cut_tool_call() -> dict[str, Any]:
    """A tool call that used the whole max_tokens budget: the next call does not continue it."""
    first = [user("Weather in Rome?")]
    lookup = tool_call("Rome", "call_9")
    limit = len(reply_ids(lookup))
    second = [*first, assistant(lookup), tool("call_9", "rain")]
    return captured(
        call(0, first, lookup, tools=TOOLS, max_tokens=limit),
        call(1, second, said("Rain."), tools=TOOLS, max_tokens=limit),
    )


def two_models() -> dict[str, Any]:
    judge = [user("Score: It is sunny.")]
    return captured(
        call(0, [user("Hi")], said("Hello."), model="agent@1"),
        call(1, judge, said("0.9"), model="judge"),
        call(
            2, [user("Hi"), assistant(said("Hello.")), user("Bye")], said("Bye."), model="agent@1"
        ),
    )


def legacy() -> dict[str, Any]:
    return {
        "messages_and_choices": [SYSTEM, user("Hi"), {"role": "assistant", "content": None}],
        "tools": TOOLS,
        "additional_histories": [{"messages_and_choices": [user("Sub")], "tools": None}],
        "reward": 0.5,
    }


def bad_tokens() -> dict[str, Any]:
    """A served reply whose token ids are not ids."""
    broken = call(0, [user("Hi")], said("Hello."))
    broken["response"]["choices"][0]["token_ids"] = [5, "five"]
    return captured(broken)


def duplicate_choices() -> dict[str, Any]:
    twice = call(0, [user("Hi")], said("Hello."), said("Hey."))
    twice["response"]["choices"][1]["index"] = 0
    return captured(twice)


# -- legacy Completions calls with exact token ids -------------------------------------------


def completion(
    second: int,
    prompt: object,
    *samples: list[int],
    prompt_ids: list[int] | None = None,
    **request: Any,
) -> dict[str, Any]:
    """One Completions call; each sample is a choice's sampled ids (its text their words)."""
    choices = []
    for index, sampled in enumerate(samples):
        choice: dict[str, Any] = {
            "index": index,
            "text": " ".join(map(str, sampled)),
            "finish_reason": "stop",
            "logprobs": None,
            "token_ids": sampled,
        }
        if prompt_ids is not None:
            choice["prompt_token_ids"] = prompt_ids
        choices.append(choice)
    return {
        "start_time": f"2026-01-01T00:02:{second:02d}Z",
        "end_time": f"2026-01-01T00:02:{second:02d}.100000Z",
        "request": {"model": "base@1", "prompt": prompt, "max_tokens": 8, **request},
        "response": {"id": f"cmpl-{second}", "object": "text_completion",
                     "created": 1767225600 + second, "model": "served", "choices": choices},
    }  # fmt: skip


def completion_turns() -> dict[str, Any]:
    """A text agent: each call's prompt ids extend the last prompt and sample; two samples
    of the second call, the first continued; a regeneration of the first call."""
    return {"exchanges": {"completions": [
        completion(0, "Q: 2+2?", [40, 41], prompt_ids=[1, 30, 31]),
        completion(1, "Q: 2+2? 4 Sure?", [50], [51, 52], prompt_ids=[1, 30, 31, 40, 41, 32]),
        completion(2, "Q: 2+2? 4 Sure? yes Why?", [60],
                   prompt_ids=[1, 30, 31, 40, 41, 32, 50, 33]),
        completion(3, "Q: 2+2?", [42], prompt_ids=[1, 30, 31]),
    ]}}  # fmt: skip


def completion_batch() -> dict[str, Any]:
    """A batch of two token prompts, the choices naming their prompt, and a token prompt whose
    ids only the request holds, its sample carried as `token_id:N` logprob tokens."""
    batch = completion(0, [[1, 7], [1, 8]], [70], [80])
    batch["response"]["choices"][0]["prompt_index"] = 1
    batch["response"]["choices"][1]["prompt_index"] = 0
    carried = completion(1, [1, 9], [])
    carried["response"]["choices"][0].update(
        token_ids=None, text="ok",
        logprobs={"tokens": ["token_id:90", "token_id:91"], "token_logprobs": [-0.1, -0.2]},
    )  # fmt: skip
    return {"exchanges": {"completions": [batch, carried]}}


def completion_without_ids() -> dict[str, Any]:
    return {"exchanges": {"completions": [completion(0, "text prompt", [5])]}}


def completion_with_suffix() -> dict[str, Any]:
    return {"exchanges": {"completions": [completion(0, [1], [5], suffix="end")]}}


def said_completion(
    second: int, prompt: str, *texts: str, ids: list[list[int]] | None = None, **request: Any
) -> dict[str, Any]:
    """A text Completions call; `ids` are the prompt's then each choice's served token ids."""
    call = completion(second, prompt, *([0] for _ in texts), **request)
    for index, choice in enumerate(call["response"]["choices"]):
        choice["text"] = texts[index]
        if ids is None:
            del choice["token_ids"]
        else:
            choice.update(prompt_token_ids=ids[0], token_ids=ids[index + 1])
    return call


def string_turns() -> dict[str, Any]:
    """Text turns: the second call continues the first (two choices), an echoed call."""
    return {"exchanges": {"completions": [
        said_completion(0, "Q: hi\nA:", " hello", ids=[[1, 2], [3]]),
        said_completion(1, "Q: hi\nA: hello\nQ: more\nA:", " sure", " fine",
                        ids=[[1, 2, 3, 4], [5], [6]]),
        said_completion(2, "Z:", "Z: ok", echo=True),
    ]}}  # fmt: skip


def string_retokenized() -> dict[str, Any]:
    """The second prompt's text continues the first, its served ids do not."""
    return {"exchanges": {"completions": [
        said_completion(0, "Q:", " a", ids=[[1], [2]]),
        said_completion(1, "Q: a\nQ:", " b", ids=[[1, 9, 3], [4]]),
    ]}}  # fmt: skip


RECONCILE = {"reconcile_text_equivalent_tokenizations": True}
TOKENS = "completions_token_histories"
STRINGS = "completions_string_histories"
COMPLETION_CASES: list[dict[str, Any]] = [
    {"trajectory": completion_turns(), "method": TOKENS},
    {"trajectory": completion_batch(), "method": TOKENS},
    {"trajectory": completion_without_ids(), "method": TOKENS},
    {"trajectory": completion_with_suffix(), "method": TOKENS},
    {"trajectory": string_turns(), "method": STRINGS},
    {"trajectory": string_retokenized(), "method": STRINGS},
    {"trajectory": string_retokenized(), "method": STRINGS, "options": RECONCILE},
    {"trajectory": completion_batch(), "method": STRINGS},
]
MULTIPLE = "Trajectory resolves to multiple protocol histories; use a protocol-specific method"
MIXED = {"exchanges": {**tool_turns()["exchanges"], **completion_turns()["exchanges"]}}
ANY_API: list[dict[str, Any]] = [
    {"trajectory": tool_turns(), "method": "histories"},
    {"trajectory": completion_without_ids(), "method": "histories"},
    {"trajectory": completion_turns(), "method": "histories"},
    {"trajectory": legacy(), "method": "histories"},
    {"trajectory": MIXED, "method": "histories"},
    {"trajectory": MIXED, "method": "histories", "options": {"model": "base@*"}},
    {"trajectory": MIXED, "method": "histories", "options": {"model": "nobody"}},
]


NO_CRITIC = {"error": "Trajectory contains no Chat Completions exchanges for model 'critic'"}
TRAJECTORIES: list[dict[str, Any]] = [
    {"trajectory": tool_turns()},
    {"trajectory": branching()},
    {"trajectory": dropped_reasoning()},
    {"trajectory": dropped_reasoning(), "options": RECONCILE},
    {"trajectory": rewritten_tokens()},
    {"trajectory": rewritten_tokens(), "options": RECONCILE},
    {"trajectory": cut_tool_call()},
    {"trajectory": two_models()},
    {"trajectory": two_models(), "options": {"model": "judge"}},
    {"trajectory": two_models(), "options": {"model": "agent@*"}},
    {"trajectory": two_models(), "options": {"model": "critic"}},
    {"trajectory": legacy()},
    {"trajectory": legacy(), "options": {"model": "agent@1"}},
    {"trajectory": bad_tokens()},
    {"trajectory": duplicate_choices()},
    *COMPLETION_CASES,
    *ANY_API,
]  # fmt: skip

# -- the other three APIs, recorded as ART records them --------------------------------------

COMPLETION: dict[str, Any] = {
    "start_time": "2026-01-01T00:00:00Z",
    "end_time": "2026-01-01T00:00:01Z",
    "request": {"model": "agent@1", "prompt": "2+2=", "max_tokens": 4},
    "response": {
        "id": "cmpl-1", "object": "text_completion", "created": 1767225600, "model": "served",
        "choices": [{"index": 0, "text": " 4", "finish_reason": "stop", "logprobs": None,
                     "prompt_token_ids": [17, 10, 17, 28], "token_ids": [220, 19]}],
    },
}  # fmt: skip
RESPONSE: dict[str, Any] = {
    "start_time": "2026-01-01T00:00:02Z",
    "end_time": "2026-01-01T00:00:03Z",
    "request": {
        "model": "agent@1",
        "instructions": "Be brief.",
        "input": [{"role": "user", "content": "Weather in Oslo?"}],
        "tools": [{"type": "function", "name": "weather", "parameters": {"type": "object"},
                   "strict": False}],
    },
    "response": {
        "id": "resp_1", "object": "response", "created_at": 1767225602, "model": "served",
        "output": [
            {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "weather",
             "arguments": "{\"city\": \"Oslo\"}", "status": "completed"},
        ],
        "parallel_tool_calls": True, "tool_choice": "auto",
        "tools": [{"type": "function", "name": "weather", "parameters": {"type": "object"},
                   "strict": False}],
        "status": "completed",
    },
}  # fmt: skip
MESSAGE: dict[str, Any] = {
    "start_time": "2026-01-01T00:00:04Z",
    "end_time": "2026-01-01T00:00:05Z",
    "request": {
        "model": "agent@1", "max_tokens": 64, "system": "Be brief.",
        "messages": [{"role": "user", "content": "Hi"}],
    },
    "response": {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "served",
        "content": [{"type": "text", "text": "Hello."}],
        "stop_reason": "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": 3, "output_tokens": 2},
    },
}  # fmt: skip
OTHER_PROTOCOLS = [
    [{"exchanges": {"completions": [COMPLETION]}}, "completions_token_histories"],
    [{"exchanges": {"completions": [COMPLETION]}}, "completions_string_histories"],
    [{"exchanges": {"responses": [RESPONSE]}}, "responses_histories"],
]

SOURCE = {"exchange": tool_turns()["exchanges"]["chat_completions"][0], "request_index": 0}
INVALID: list[list[Any]] = [
    ["ChatCompletionsMessageSource", {**SOURCE, "request_index": "0"}],
    ["ChatCompletionsMessageSource", {**SOURCE, "request_index": 1.0}],
    ["ChatCompletionsMessageSource", {**SOURCE, "turn": 1}],
    ["ChatCompletionsMessageSource", {"request_index": 0}],
    ["ChatCompletionsHistory", {"model": "m", "messages": []}],
    ["ChatCompletionsHistory", {"messages": [], "message_sources": []}],
    ["ChatCompletionsHistory", {"model": "m", "messages": [], "message_sources": [], "x": 1}],
    ["AnthropicMessagesHistory", {"model": None, "messages": [], "message_sources": []}],
    ["CompletionsSource", {"exchange": COMPLETION}],
    ["CompletionsTokenSourceSpan", {"start": 0, "end": 2}],
    ["CompletionsTokenHistory",
     {"model": "m", "prompt": "1 2", "prompt_sources": [], "sampled_spans": []}],
    ["CompletionsStringHistory",
     {"model": "m", "prompt": "ab", "prompt_sources": [], "sampled_spans": [[0]]}],
    ["CompletionsExchange", {**COMPLETION, "response": {"id": "x"}}],
    ["ResponsesExchange", {**RESPONSE, "response": {"id": "x"}}],
    ["MessagesExchange", {**MESSAGE, "response": {**MESSAGE["response"], "content": "Hello."}}],
    ["MessagesExchange", {**MESSAGE, "end_time": "yesterday"}],
    ["ChatCompletionsExchange", {**SOURCE["exchange"], "response": {"choices": []}}],
]  # fmt: skip
SAME_AS_ART = {
    "CompletionsExchange", "ResponsesExchange", "ChatCompletionsExchange",
    "ChatCompletionsMessageSource",
}  # fmt: skip
ACCEPTED: list[list[Any]] = [
    ["CompletionsExchange", COMPLETION],
    ["ResponsesExchange", RESPONSE],
    ["MessagesExchange", MESSAGE],
    ["ChatCompletionsExchange", SOURCE["exchange"]],
    ["ChatCompletionsMessageSource", SOURCE],
    ["TrajectoryExchanges", {"chat_completions": [SOURCE["exchange"]], "completions": [COMPLETION],
                             "responses": [RESPONSE], "messages": [MESSAGE]}],
]  # fmt: skip


# -- Anthropic Messages calls: token ids as above, a block renders as its words -------------


def block_text(block: dict[str, Any]) -> str:
    if block["type"] == "thinking":
        return f"think {block['thinking']} done"
    if block["type"] == "tool_use":
        return f"call {block['name']} {json.dumps(block['input'])}"
    if block["type"] == "tool_result":
        return f"result {block['content']}"
    return str(block["text"])


def anthropic_render(messages: list[dict[str, Any]], *, keep_thinking: bool = False) -> list[int]:
    ids: list[int] = []
    for message in messages:
        content = message["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        text = " ".join(block_text(b) for b in blocks if keep_thinking or b["type"] != "thinking")
        ids += [1, ROLES[message["role"]], *words(text), 2]
    return [*ids, 1, ROLES["assistant"]]


def anthropic_call(
    second: int,
    messages: list[dict[str, Any]],
    content: list[dict[str, Any]],
    *,
    system: str | None = "Be brief.",
    tools: list[dict[str, Any]] | None = None,
    prompt_ids: list[int] | None = None,
) -> dict[str, Any]:
    request: dict[str, Any] = {"model": "claude@1", "max_tokens": 256, "messages": messages}
    if system is not None:
        request["system"] = system
    if tools is not None:
        request["tools"] = tools
    reply_text = " ".join(block_text(b) for b in content)
    return {
        "start_time": f"2026-01-01T00:01:{second:02d}Z",
        "end_time": f"2026-01-01T00:01:{second:02d}.250000Z",
        "request": request,
        "response": {
            "id": f"msg_{second}", "type": "message", "role": "assistant", "model": "served",
            "content": content,
            "stop_reason": "tool_use" if content[-1]["type"] == "tool_use" else "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 5},
            "prompt_token_ids": anthropic_render(messages) if prompt_ids is None else prompt_ids,
            "token_ids": [*words(reply_text), 2],
        },
    }  # fmt: skip


ANTHROPIC_TOOLS = [
    {
        "name": "weather",
        "description": "Weather in a city.",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
]


def anthropic_tool_turns() -> list[dict[str, Any]]:
    """Ask, think and call the tool, read the result, answer; the template keeps past
    thinking, so each call continues the last."""
    first = [{"role": "user", "content": "Weather in Oslo?"}]
    lookup: list[dict[str, Any]] = [
        {"type": "thinking", "thinking": "need the tool", "signature": "sig"},
        {"type": "tool_use", "id": "tu_1", "name": "weather", "input": {"city": "Oslo"}},
    ]
    second: list[dict[str, Any]] = [
        *first,
        {"role": "assistant", "content": lookup},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "tu_1", "content": "snow"}],
        },
    ]
    kept = anthropic_render(second, keep_thinking=True)
    return [
        anthropic_call(0, first, lookup, tools=ANTHROPIC_TOOLS),
        anthropic_call(1, second, [{"type": "text", "text": "Snow."}], tools=ANTHROPIC_TOOLS,
                       prompt_ids=kept),
    ]  # fmt: skip


def anthropic_dropped_thinking(*, resend_thinking: bool = True) -> list[dict[str, Any]]:
    """The next prompt leaves the sampled thinking out (its tokens no longer extend the
    first call): a new sequence. With the thinking block re-sent or not (a client that strips
    it), the earlier reply keeps its source in the first call, as its visible part matches."""
    first = [{"role": "user", "content": "2+2?"}]
    answer = {"type": "text", "text": "4."}
    thought = [{"type": "thinking", "thinking": "two and two", "signature": "s"}, answer]
    resent = thought if resend_thinking else [answer]
    second: list[dict[str, Any]] = [
        *first,
        {"role": "assistant", "content": resent},
        {"role": "user", "content": "Sure?"},
    ]
    return [anthropic_call(0, first, thought),
            anthropic_call(1, second, [{"type": "text", "text": "Yes."}])]  # fmt: skip


def anthropic_branches() -> list[dict[str, Any]]:
    """A regeneration of the first call and a sub-agent without a system prompt."""
    first = [{"role": "user", "content": "Pick a city."}]
    return [
        anthropic_call(0, first, [{"type": "text", "text": "Rome."}]),
        anthropic_call(1, first, [{"type": "text", "text": "Lima."}]),
        anthropic_call(2, [{"role": "user", "content": "Sum up: Rome."}],
                       [{"type": "text", "text": "A city."}], system=None),
    ]  # fmt: skip


ANTHROPIC = [
    anthropic_tool_turns(),
    anthropic_dropped_thinking(),
    anthropic_branches(),
    anthropic_dropped_thinking(resend_thinking=False),
]


def history_class(history: dict[str, Any]) -> str:
    """Which history class a dump is (by its fields)."""
    if "messages_and_choices" in history:
        return "LegacyHistory"
    if "prompt" in history:
        text = isinstance(history["prompt"], str)
        return "CompletionsStringHistory" if text else "CompletionsTokenHistory"
    return "AnthropicMessagesHistory" if "system" in history else "ChatCompletionsHistory"


def sdk_neutral(value: Any) -> Any:
    """A dump without the null `metadata` field the OpenAI SDK 3.x (arthex's) added to
    ChatCompletion; ART's venv has the 2.x SDK, whose dump lacks it."""
    if isinstance(value, list):
        return [sdk_neutral(item) for item in value]
    if isinstance(value, dict):
        return {
            key: sdk_neutral(item)
            for key, item in value.items()
            if not (key == "metadata" and item is None and value.get("object") == "chat.completion")
        }
    return value


def test_chat_histories_and_records_are_arts() -> None:
    records = [["MessagesExchange", record] for calls in ANTHROPIC for record in calls]
    cases = {"trajectories": TRAJECTORIES, "valid": ACCEPTED + records, "invalid": INVALID,
             "other_protocols": OTHER_PROTOCOLS}  # fmt: skip
    art, ours = both_outcomes("trajectory_histories_script", cases)
    art_only = art.pop("art_only")
    assert ours["rejected"] == art["rejected"] == [True] * len(INVALID)
    for index, (mine, theirs) in enumerate(zip(ours["histories"], art["histories"], strict=True)):
        assert sdk_neutral(mine) == theirs, (
            f"trajectory case {index}: {first_difference(sdk_neutral(mine), theirs)}"
        )
    shapes = [len(found) if isinstance(found, list) else found for found in art["histories"]]
    assert shapes[:13] == [1, 4, 2, 1, 2, 1, 2, 2, 1, 1, NO_CRITIC, 2, 2]
    assert shapes[13:] == [
        {"error": "Chat Completions token_ids contains an invalid exact token ID"},
        {"error": "Chat Completions response contains duplicate choice indices"},
        3,
        3,
        {"error": "Completions token history requires exact token IDs for every choice"},
        {"error": "Completions suffix is not supported"},
        3,
        2,
        1,
        {"error": "Completions string history requires text prompts for every choice"},
        1,
        1,
        3,
        2,
        {"error": MULTIPLE},
        3,
        {"error": "Trajectory contains no exchanges for model 'nobody'"},
    ]
    assert [name for name, _ in art_only] == [
        "CompletionsTokenHistory", "CompletionsStringHistory", "ResponsesHistory",
    ]  # fmt: skip
    # An Anthropic reply is kept as read (ART's SDK fills its defaulted fields) and so are the
    # other three APIs' records in a trajectory's exchanges; the rest re-dump as ART's do.
    # ART's SDK writes an Anthropic reply with its defaulted fields: the records as ART keeps
    # them are the recorded calls of the Anthropic trajectories below
    as_art = iter(art["valid"][len(ACCEPTED) :])
    anthropic = [{"exchanges": {"messages": [next(as_art) for _ in calls]}} for calls in ANTHROPIC]
    same = [i for i, (name, _) in enumerate(ACCEPTED) if name in SAME_AS_ART]
    assert [sdk_neutral(ours["valid"][i]) for i in same] == [art["valid"][i] for i in same]

    # each library reads what the other dumped, and dumps it again unchanged: ART's records,
    # ART's derived histories of all four APIs and arthex's chat histories
    dumps = [[name, dump] for (name, _), dump in zip(ACCEPTED, art["valid"], strict=False)]
    dumps += art_only
    for found in ours["histories"]:
        if isinstance(found, list):
            dumps.extend([history_class(history), history] for history in found)
    method = "anthropic_messages_histories"
    derived: list[dict[str, Any]] = [{"trajectory": t, "method": method} for t in anthropic]
    derived += [{"trajectory": anthropic[1], "method": method, "options": RECONCILE}]
    derived += [{"trajectory": t, "method": method, "as_chat": True} for t in anthropic]
    derived += [{"trajectory": anthropic[0], "method": "histories"}]
    art, ours = both_outcomes(
        "trajectory_histories_script", {"trajectories": derived, "valid": dumps, "invalid": []}
    )
    for index, (mine, theirs) in enumerate(zip(ours["histories"], art["histories"], strict=True)):
        assert mine == theirs, f"Anthropic case {index}: {first_difference(mine, theirs)}"
    assert [len(found) for found in art["histories"]] == [1, 2, 3, 2, 1, 1, 2, 3, 2, 1]
    in_chat_form = art["histories"][5][0]["messages"]
    assert [m["role"] for m in in_chat_form] == ["system", "user", "assistant", "tool", "assistant"]
    stripped = art["histories"][3][1]["message_sources"]
    assert [source["request_index"] for source in stripped] == [0, None, 2, None]
    dumps += [[history_class(history), history] for found in ours["histories"] for history in found]
    art, ours = both_outcomes(
        "trajectory_histories_script", {"trajectories": [], "valid": dumps, "invalid": []}
    )
    expected = [sdk_neutral(dump) for _, dump in dumps]
    assert sdk_neutral(art["valid"]) == expected
    for (name, _), mine, want in zip(dumps, ours["valid"], expected, strict=True):
        assert sdk_neutral(mine) == want, f"{name}: {first_difference(sdk_neutral(mine), want)}"
