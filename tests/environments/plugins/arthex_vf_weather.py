"""A verifiers tool environment for the tests (id `arthex_vf_weather`): the task asks about the
weather in two cities, the harness runs a tool loop in-process (it offers `get_weather` to the
model and runs each call the model makes), and the task's reward checks the final answer.

The tiny model is taught the weather script of tests/e2e/_weather.py, so greedy decoding
really calls the tool twice and then answers. The harness keeps every raw response it got
(`RECEIVED`, by trace id): the tests' own record of what the model sampled.
"""

from __future__ import annotations

import json
from typing import Any

import datasets
import httpx
import verifiers.v1 as vf

from tests.e2e._weather import FINAL, QUESTION, SYSTEM, TOOLS, WEATHER

RECEIVED: dict[str, list[dict[str, Any]]] = {}
ROWS = [{"question": QUESTION["content"], "answer": FINAL}]


class WeatherData(vf.TaskData):
    answer: str


class WeatherTask(vf.Task[WeatherData, vf.State, vf.TaskConfig]):
    @vf.reward
    async def answered(self, task: WeatherData, trace: vf.Trace) -> float:
        return 1.0 if trace.last_reply == task.answer else 0.0

    @vf.metric
    async def tool_results(self, trace: vf.Trace) -> float:
        return float(len(trace.tool_messages))


class WeatherTaskset(vf.Taskset[WeatherTask, vf.TasksetConfig]):
    def load(self) -> Any:
        for row in datasets.Dataset.from_list(ROWS):
            yield WeatherTask(
                WeatherData(prompt=row["question"], answer=row["answer"]), self.config.task
            )


class ToolLoopHarness(vf.Harness[vf.HarnessConfig]):
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(
        self,
        ctx: vf.ModelContext,
        trace: vf.Trace,
        runtime: vf.Runtime,
        endpoint: str,
        secret: str,
        mcp_urls: dict[str, str],
        data: vf.TaskData,
    ) -> vf.ProgramResult:
        messages: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": data.prompt_text}]
        received = RECEIVED.setdefault(trace.id, [])
        async with httpx.AsyncClient(timeout=120) as client:
            for _turn in range(4):
                reply = await client.post(
                    endpoint.rstrip("/") + "/chat/completions",
                    json={"model": ctx.model, "messages": messages, "tools": TOOLS},
                    headers={"Authorization": f"Bearer {secret}"},
                )
                reply.raise_for_status()
                body = reply.json()
                received.append(body)
                message = body["choices"][0]["message"]
                calls = message.get("tool_calls") or []
                if not calls:
                    break
                messages.append(
                    {"role": "assistant", "content": message.get("content"), "tool_calls": [
                        {"id": c["id"], "type": "function", "function": {
                            "name": c["function"]["name"],
                            "arguments": c["function"]["arguments"]}}
                        for c in calls
                    ]}
                )  # fmt: skip
                for call in calls:
                    city = json.loads(call["function"]["arguments"]).get("city", "")
                    messages.append(
                        {
                            "role": "tool",
                            "tool_call_id": call["id"],
                            "content": WEATHER.get(city, "?"),
                        }
                    )
        return vf.ProgramResult(exit_code=0, stdout="", stderr="")


__all__ = ["ToolLoopHarness", "WeatherTaskset"]
