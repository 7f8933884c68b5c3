"""A verifiers taskset and its harness, for the tests: arithmetic questions from an in-memory
dataset (`datasets.Dataset.from_list`), scored by the task's own reward and metric functions.

verifiers loads a taskset and a harness by id, as a top-level module exporting their classes
through `__all__`: this module's id is `arthex_vf_arith` (the conftest puts plugins/ on
sys.path). The harness runs in-process (no program to install): it asks the model through
verifiers' interception endpoint, as any harness must, and keeps every raw response it got
(`RECEIVED`, by trace id) as the tests' independent record of what the model sampled.
"""

from __future__ import annotations

from typing import Any

import datasets
import httpx
import verifiers.v1 as vf

ROWS = [
    {"question": "What is 2 plus 3?", "answer": "5"},
    {"question": "What is 4 plus 4?", "answer": "8"},
    {"question": "What is 1 plus 6?", "answer": "7"},
]
RECEIVED: dict[str, list[dict[str, Any]]] = {}
FOLLOW_UP = "Check your answer and give it again."


class ArithData(vf.TaskData):
    answer: str


class ArithTask(vf.Task[ArithData, vf.State, vf.TaskConfig]):
    @vf.reward
    async def correct(self, task: ArithData, trace: vf.Trace) -> float:
        return 1.0 if task.answer in trace.last_reply else 0.0

    @vf.reward(weight=0.5)
    async def brevity(self, trace: vf.Trace) -> float:
        return 1.0 / (1.0 + len(trace.last_reply))

    @vf.metric
    async def reply_chars(self, trace: vf.Trace) -> float:
        trace.info["reply"] = trace.last_reply
        trace.info["turns"] = {"count": trace.num_turns}
        return float(len(trace.last_reply))


class ArithTaskset(vf.Taskset[ArithTask, vf.TasksetConfig]):
    def load(self) -> Any:
        for row in datasets.Dataset.from_list(ROWS):
            yield ArithTask(
                ArithData(prompt=row["question"], answer=row["answer"]), self.config.task
            )


async def converse(
    ctx: vf.ModelContext, trace: vf.Trace, endpoint: str, secret: str, data: vf.TaskData, turns: int
) -> vf.ProgramResult:
    """The harness's program: `turns` model turns, a follow-up question between them."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": data.prompt_text}]
    received = RECEIVED.setdefault(trace.id, [])
    async with httpx.AsyncClient(timeout=120) as client:
        for turn in range(turns):
            if turn:
                messages.append({"role": "user", "content": FOLLOW_UP})
            reply = await client.post(
                endpoint.rstrip("/") + "/chat/completions",
                json={"model": ctx.model, "messages": messages},
                headers={"Authorization": f"Bearer {secret}"},
            )
            reply.raise_for_status()
            body = reply.json()
            received.append(body)
            messages.append(
                {"role": "assistant", "content": body["choices"][0]["message"]["content"] or ""}
            )
    return vf.ProgramResult(exit_code=0, stdout="", stderr="")


class OneTurnHarness(vf.Harness[vf.HarnessConfig]):
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False
    TURNS = 1  # how many times the program asks the model

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
        return await converse(ctx, trace, endpoint, secret, data, turns=self.TURNS)


__all__ = ["ArithTaskset", "OneTurnHarness"]
