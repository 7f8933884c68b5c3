"""Record what NAT's ART adapter (and ART 0.5.17's TrainableModel under it) sends to an ART
server: every request's method, path, headers of note and JSON body, in order. Executed by
NAT's venv. The server here only records and answers as ART's `art run` does (null, a step,
`[base_url, api_key]`, newline-delimited metrics); the recording is the unit tests' wire data
(tests/unit/data/art_protocol/), so the fast suite pins the shapes without NAT's venv.

stdin: {"host": loopback address, "base_model": str, "out": path}
"""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import nat_common as common

RECORDED: list[dict[str, Any]] = []
STEP = {"value": 0}
INFERENCE_PORT = 8000  # NAT's health check asks host:8000, whatever the config says


class Recorder(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        return None

    def _reply(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        RECORDED.append(
            {
                "port": "inference" if self.server.server_port == INFERENCE_PORT else "api",
                "method": "GET",
                "path": self.path,
                "authorization": self.headers.get("authorization"),
            }
        )
        self._reply(200, json.dumps({"object": "list", "data": []}).encode())

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length", "0"))
        raw = self.rfile.read(length)
        RECORDED.append(
            {
                "port": "api",
                "method": "POST",
                "path": self.path,
                "content_type": self.headers.get("content-type"),
                "authorization": self.headers.get("authorization"),
                "body": json.loads(raw) if raw else None,
            }
        )
        host = self.server.server_address[0]
        answers: dict[str, Any] = {
            "/register": None,
            "/_get_step": STEP["value"],
            "/_delete_checkpoint_files": None,
            "/_prepare_backend_for_training": [f"http://{host}:{INFERENCE_PORT}/v1", "default"],
            "/close": None,
        }
        if self.path == "/_train_model":
            STEP["value"] += 1
            line = json.dumps({"loss/train": 0.5, "loss/grad_norm": 1.0}) + "\n"
            lines = line * 2
            self._reply(200, lines.encode(), "application/x-ndjson")
            return
        self._reply(200, json.dumps(answers[self.path]).encode())


def serve(host: str, port: int) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer((host, port), Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def trajectories() -> list[list[Any]]:
    lp = common.logprobs_of
    first = [
        common.episode(
            [
                {"role": "system", "content": "Answer with one word."},
                {"role": "user", "content": "Say hello."},
                {
                    "role": "assistant",
                    "content": "Hello",
                    "logprobs": lp([72, 101, 2], [-0.5, -0.25, -0.125]),
                },
            ],
            1.0,
            "q0",
        ),
        common.episode(
            [
                {"role": "system", "content": "Answer with one word."},
                {"role": "user", "content": "Say hello."},
                {"role": "assistant", "content": "Hi", "logprobs": lp([73, 2], [-1.5, -0.75])},
            ],
            0.0,
            "q0",
        ),
    ]
    second = [
        common.episode(
            [
                {"role": "user", "content": "What is 2 + 2?"},
                {
                    "role": "assistant",
                    "content": "calc(2+2)",
                    "logprobs": lp([99, 97, 108], [-0.1, -0.2, -0.3]),
                },
                {"role": "tool", "content": "4"},
                {"role": "assistant", "content": "4", "logprobs": lp([52, 2], [-0.05, -0.01])},
            ],
            1.0,
            "q1",
        ),
        common.episode(
            [
                {"role": "user", "content": "What is 2 + 2?"},
                {"role": "assistant", "content": "5", "logprobs": lp([53, 2], [-2.0, -0.5])},
            ],
            0.0,
            "q1",
        ),
    ]
    return [first, second]


async def main() -> None:
    from nat.data_models.finetuning import TrainingStatusEnum
    from nat.plugins.openpipe.trainer_adapter import ARTTrainerAdapter

    payload = common.read_payload()
    host = payload["host"]
    api = serve(host, 0)
    inference = serve(host, INFERENCE_PORT)
    try:
        config = common.adapter_config(
            host,
            api.server_port,
            name="agent",
            project="nat-project",
            base_model=payload["base_model"],
            learning_rate=1e-4,
            delete_old_checkpoints=True,
        )
        adapter = ARTTrainerAdapter(config)
        await adapter.initialize(common.finetune_config())
        statuses = []
        for run_id in ("run-1", "run-2"):
            ref = await adapter.submit(common.collection(trajectories(), run_id))
            status = await adapter.wait_until_complete(ref, poll_interval=0.05)
            statuses.append(str(status.status))
            assert status.status == TrainingStatusEnum.COMPLETED, status
    finally:
        api.shutdown()
        inference.shutdown()
    common.answer(payload, {"requests": RECORDED, "statuses": statuses})


if __name__ == "__main__":
    asyncio.run(main())
