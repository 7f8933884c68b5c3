"""Runs for the viewer's tests, written by the real frontend (and a LocalBackend-layout
checkpoint folder per step), and a running `arthex view` subprocess to talk to.

`proj/agent`: a TrainableModel trained three steps by the InMemoryBackend (train split), a val
evaluation of two groups at each of steps 0..3 whose mean rewards are `VAL_MEANS` (step 1 is
the best, step 3 the latest), tool calls and tool results, a planted message, a message that
looks like a script, and sampled tokens with logprobs. `other/evals`: one test metric.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from openai.types.chat.chat_completion import Choice

import arthex
from arthex.testing.builders import make_choice, make_exception, make_trajectory, synthetic_groups
from arthex.testing.fakes.backend import InMemoryBackend
from tests._serverless import ready_line

PLANTED = "The capital of Atlantis is Poseidonia-7731"
SCRIPT = "<script>document.title='pwned'</script><b>bold?</b>"
VAL_MEANS = [0.2, 0.9, 0.4, 0.5]
SPREAD = 0.3  # each val group: rewards mean - SPREAD, mean + SPREAD
STEPS = 3


LOGPROBS = (-0.05, -0.2, -1.5, -0.1, -2.5, -0.3, -0.01)


def sampled(text: str) -> Choice:
    """An assistant Choice whose tokens are the words of `text`, with logprobs from LOGPROBS."""
    words = re.findall(r"\S+\s*", text)
    logprobs = [LOGPROBS[k % len(LOGPROBS)] for k in range(len(words))]
    return Choice.model_validate(
        {
            "finish_reason": "stop",
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "logprobs": {
                "content": [
                    {"token": w, "logprob": lp, "bytes": None, "top_logprobs": []}
                    for w, lp in zip(words, logprobs)
                ],
                "refusal": None,
            },
        }
    )


def val_groups(step: int) -> list[arthex.TrajectoryGroup]:
    """Group 0: a weather tool call, its result, a closing answer (+ one failed rollout).
    Group 1: a plain question; at step 2 one answer is the planted text, one the script."""
    mean = VAL_MEANS[step]
    weather = []
    for i, reward in enumerate((mean - SPREAD, mean + SPREAD)):
        call = make_choice(
            None, tool_calls=[{"name": "get_weather", "arguments": f'{{"city": "Paris-{i}"}}'}]
        )
        weather.append(
            make_trajectory(
                reward,
                messages=[
                    {"role": "system", "content": "You are a weather assistant."},
                    {"role": "user", "content": f"What is the weather in Paris? (step {step})"},
                    call,
                    {"role": "tool", "tool_call_id": "call_0", "content": "sunny, 21 C"},
                    sampled(f"It is sunny and 21 degrees ({i})."),
                ],
                metrics={"called_tool": True},
                metadata={"city": "Paris"},
            )
        )
    answers = ("Poseidonia, I think.", "I do not know.")
    if step == 2:
        answers = (PLANTED, SCRIPT)
    quiz = [
        make_trajectory(reward, prompt="What is the capital of Atlantis?", choice=sampled(answer))
        for reward, answer in zip((mean + SPREAD, mean - SPREAD), answers)
    ]
    return [
        arthex.TrajectoryGroup([*weather, make_exception("rollout timed out")]),
        arthex.TrajectoryGroup(quiz, metadata={"scenario": "atlantis"}),
    ]


async def _build(base: Path) -> None:
    model = arthex.TrainableModel(
        name="agent", project="proj", base_model="tiny", base_path=str(base), report_metrics=[]
    )
    evals = arthex.Model(name="evals", project="other", base_path=str(base), report_metrics=[])
    await evals.log(metrics={"accuracy": 0.5}, split="test")
    await model.register(InMemoryBackend())
    for step in range(len(VAL_MEANS)):
        await model.log(val_groups(step), split="val")
        if step < STEPS:
            await model.train(
                synthetic_groups(offset=step), config=arthex.TrainConfig(learning_rate=1e-2)
            )
    await model.close()
    model_dir = base / "proj" / "models" / "agent"
    for step in range(len(VAL_MEANS)):  # the LocalBackend's layout: a state file marks one
        folder = model_dir / "checkpoints" / f"{step:04d}"
        folder.mkdir(parents=True)
        (folder / "trainer_state.json").write_text(json.dumps({"step": step}))
        (folder / "model.safetensors").write_bytes(b"\0" * 1000)


def build_runs(base: Path) -> Path:
    asyncio.run(_build(base))
    return base


def snapshot(root: Path) -> dict[str, tuple[int, str]]:
    """Every file and directory below `root`, with its size and content hash: compared before
    and after, it proves nothing was created, removed or changed."""
    found: dict[str, tuple[int, str]] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_file():
            data = path.read_bytes()
            found[rel] = (len(data), hashlib.sha256(data).hexdigest())
        else:
            found[rel] = (-1, "dir")
    return found


class Viewer:
    """`arthex view PATH...` as a subprocess, and the URL it printed."""

    def __init__(self, paths: Sequence[str], *args: str, env: dict[str, str] | None = None) -> None:
        command = [sys.executable, "-m", "arthex.apps.cli", "view", *paths, "--port", "0", *args]
        # stderr to a file: a pipe nobody reads would block a viewer that writes a lot
        self._log = tempfile.NamedTemporaryFile(prefix="arthex-view-")  # noqa: SIM115 (closed in stop)
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=self._log,
            env={**os.environ, **(env or {})},
        )
        line = ready_line(self.process, Path(self._log.name), 60, "arthex view", "http")
        self.url = line.strip()
        self.base = self.url.split("?", 1)[0].rstrip("/")

    def get(self, path: str, **params: Any) -> Any:
        import httpx

        response = httpx.get(f"{self.base}{path}", params=params, timeout=30)
        return response

    def json(self, path: str, **params: Any) -> Any:
        response = self.get(path, **params)
        assert response.status_code == 200, response.text
        return response.json()

    def stop(self) -> float:
        """SIGTERM, and the seconds it took the process to end."""
        start = time.monotonic()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=10)
        elapsed = time.monotonic() - start
        if self.process.stdout is not None:
            self.process.stdout.close()
        self._log.close()
        return elapsed


@contextlib.contextmanager
def viewer(paths: Sequence[str], *args: str, env: dict[str, str] | None = None) -> Iterator[Viewer]:
    running = Viewer(paths, *args, env=env)
    try:
        yield running
    finally:
        running.stop()
