"""An OpenAI-compatible chat server on loopback that answers each chat completion with a
scripted text and keeps every request: the stand-in for a hosted model (a judge, a scenario
generator) that tests talk to over real HTTP through the openai client."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from openai import AsyncOpenAI

Script = Callable[[dict[str, Any]], str]
PROMPT_TOKENS = 100  # per message the judge is sent: the server's own count, the tests' oracle


class ScriptedChatServer:
    """Answers each chat completion with `script(request)`; keeps every request it got."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests: list[dict[str, Any]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append(body)
                content = server.script(body)
                reply = {
                    "id": f"judge-{len(server.requests)}",
                    "object": "chat.completion",
                    "created": 1,
                    "model": body["model"],
                    "choices": [
                        {
                            "index": 0,
                            "finish_reason": "stop",
                            "message": {"role": "assistant", "content": content},
                        }
                    ],
                    "usage": {
                        "prompt_tokens": PROMPT_TOKENS * len(body["messages"]),
                        "completion_tokens": len(content),
                        "total_tokens": PROMPT_TOKENS * len(body["messages"]) + len(content),
                    },
                }
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def client(self) -> AsyncOpenAI:
        return AsyncOpenAI(base_url=self.base_url, api_key="judge-key", max_retries=0)
