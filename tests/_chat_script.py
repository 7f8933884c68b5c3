"""A scripted chat-completions server for capture tests, as an httpx transport (no sockets).

It renders a request's messages with a simple template whose token ids are the UTF-8 bytes of
the text: `<role>content[call name args]</>` per message, then `<assistant>` as the generation
prompt. A reply's `token_ids` are the bytes of `content[calls]</>`, so an agent that appends
the reply and more messages sends a prompt that extends the previous prompt + reply token by
token, exactly as a real template does when nothing is rewritten. This is the tests' oracle:
it knows what it sampled (`sampled`) independently of the code under test.

Transports are httpx2's (the client family of the OpenAI SDK) unless another family (httpx)
is asked for.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from types import ModuleType
from typing import Any

import httpx2

Reply = Callable[[dict[str, Any]], tuple[str | None, list[dict[str, Any]]]]


def render(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
    text = "<tools>" + json.dumps(tools, sort_keys=True) + "</>" if tools else ""
    for message in messages:
        text += f"<{message['role']}>{message.get('content') or ''}"
        for call in message.get("tool_calls") or []:
            text += f"[{call['function']['name']} {call['function']['arguments']}]"
        text += "</>"
    return text + "<assistant>"


def tokens(text: str) -> list[int]:
    return list(text.encode("utf-8"))


class ChatScript:
    """`reply(request) -> (content, tool_calls)` decides each answer; every response and the
    ids it sampled are kept in `sampled` (one entry per call, in order of arrival)."""

    def __init__(self, reply: Reply, *, logprob: float = -0.25) -> None:
        self.reply = reply
        self.logprob = logprob
        self.sampled: list[dict[str, Any]] = []
        self.status = 200

    def transport(self, family: ModuleType = httpx2) -> Any:
        return family.MockTransport(lambda request: self.handle(family, request))

    def handle(self, family: ModuleType, request: Any) -> Any:
        if not request.url.path.endswith("/chat/completions"):
            return family.Response(404, json={"error": {"message": "not found"}})
        body = json.loads(request.content)
        if self.status != 200:
            return family.Response(self.status, json={"error": {"message": "scripted failure"}})
        prompt = tokens(render(body["messages"], body.get("tools")))
        choices = []
        for index in range(body.get("n", 1)):
            content, calls = self.reply({**body, "choice": index})
            text = (content or "") + "".join(
                f"[{c['function']['name']} {c['function']['arguments']}]" for c in calls
            )
            ids = tokens(text + "</>")
            message: dict[str, Any] = {"role": "assistant", "content": content}
            if calls:
                message["tool_calls"] = calls
            choices.append(
                {
                    "index": index,
                    "message": message,
                    "finish_reason": "tool_calls" if calls else "stop",
                    "logprobs": {
                        "content": [
                            {
                                "token": f"token_id:{t}",
                                "logprob": self.logprob,
                                "bytes": [t],
                                "top_logprobs": [],
                            }
                            for t in ids
                        ]
                    },
                    "token_ids": ids,
                }
            )
        response = {
            "id": f"chatcmpl-{len(self.sampled)}",
            "object": "chat.completion",
            "created": 1,
            "model": body["model"],
            "choices": choices,
            "prompt_token_ids": prompt,
            "usage": {"prompt_tokens": len(prompt), "completion_tokens": 1, "total_tokens": 1},
        }
        self.sampled.append({"request": body, "prompt": prompt, "choices": choices})
        return family.Response(200, json=response)


def tool_call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }
