"""Inference: completions/s at 1 and 8 concurrent requests, direct engine calls against the
OpenAI-compatible server through the real `openai` client.

Every path samples the same rendered prompt with the same per-request seeds, so the i-th
completion is the same token sequence on every path whatever else shares its batch; the
engine has no "ignore EOS", so tokens are counted and tokens/s is printed beside
completions/s. Each caller runs closed-loop (send, await the answer, send the next), the
way rollout workers do, and the server paths ask for logprobs as training does.

Server paths: the `openai` client in the server's own process (as rollouts run beside a
LocalBackend), and in a child process (as a separate rollout process would). A third
server row answers from an instant engine that replays the same samples: what HTTP and the
client cost per completion, to set against what decoding costs.

Model: the tiny test model on CPU unless `ARTHEX_BENCH_MODEL` (or `--model DIR`) names a
local Hugging Face model directory; `ARTHEX_BENCH_DEVICE` (or `--device`) picks the device.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import queue
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from arthex.adapters.inference.engine import Sample, SamplingParams
from arthex.adapters.inference.http_server import InferenceServer
from arthex.adapters.inference.torch_engine import TorchEngine
from arthex.testing.tiny_model import tiny_model

from ._table import print_table

MODEL = "bench"
KEY = "bench-key"
MAX_TOKENS = 32
TEMPERATURE = 1.0
CONCURRENCY = (1, 8)


@dataclasses.dataclass(frozen=True)
class Plan:
    """How much to time: `rounds` rounds of `completions[concurrency]` completions each."""

    rounds: int = 5
    completions: tuple[tuple[int, int], ...] = ((1, 24), (8, 96))

    def total(self, concurrency: int) -> int:
        return dict(self.completions)[concurrency]


TINY_PLAN = Plan()
SMALL_PLAN = Plan(rounds=2, completions=((1, 6), (8, 32)))
WARM_UP_SEED = 10_000
MESSAGES: list[Any] = [
    {"role": "system", "content": "You are a helpful assistant. Answer the question briefly."},
    {"role": "user", "content": "Count from one to ten, then say done."},
]
DIRECT, SERVER, CHILD, HTTP_ONLY = (
    "direct engine calls",
    "server, openai client in-process",
    "server, openai client in a child process",
    "server, instant engine (HTTP + client only)",
)

Call = Callable[[int], Awaitable[int]]  # seed -> completion tokens
Timings = list[tuple[float, int]]  # (seconds, tokens) per round


async def closed_loop(call: Call, concurrency: int, total: int, first_seed: int) -> int:
    """`concurrency` workers share `total` requests, each sending its next when the last is
    answered; returns the completion tokens produced."""
    seeds = iter(range(first_seed, first_seed + total))
    tokens = 0

    async def worker() -> None:
        nonlocal tokens
        for seed in seeds:
            produced = await call(seed)  # not `tokens += await ...`: that loses updates
            tokens += produced

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return tokens


async def timed_rounds(call: Call, concurrency: int, plan: Plan) -> Timings:
    total = plan.total(concurrency)
    await closed_loop(call, concurrency, concurrency * 2, WARM_UP_SEED)
    timings = []
    for _ in range(plan.rounds):
        started = time.perf_counter()
        tokens = await closed_loop(call, concurrency, total, 0)
        timings.append((time.perf_counter() - started, tokens))
    return timings


def served_call(client: Any) -> Call:
    async def served(seed: int) -> int:
        response = await client.chat.completions.create(
            model=MODEL,
            messages=MESSAGES,
            max_tokens=MAX_TOKENS,
            temperature=TEMPERATURE,
            seed=seed,
            logprobs=True,
        )
        return len((response.choices[0].model_extra or {})["token_ids"])

    return served


def _child_rounds(base_url: str, concurrency: int, plan: Plan, out: Any) -> None:
    """In a child process: the server path's rounds, with the client's CPU time spent
    outside the server's process; puts the timings on `out`."""

    async def rounds() -> Timings:
        import openai

        client = openai.AsyncOpenAI(base_url=base_url, api_key=KEY, max_retries=0)
        try:
            return await timed_rounds(served_call(client), concurrency, plan)
        finally:
            await client.close()

    out.put(asyncio.run(rounds()))


async def in_child(base_url: str, concurrency: int, plan: Plan) -> Timings:
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    child = context.Process(target=_child_rounds, args=(base_url, concurrency, plan, out))
    child.start()
    try:
        while True:
            try:
                # Wait off the event loop: the server on it must keep answering the child.
                timings: Timings = await asyncio.to_thread(out.get, True, 1.0)
                return timings
            except queue.Empty:
                if not child.is_alive():
                    exit_code = child.exitcode
                    raise RuntimeError(f"the client process failed (exit {exit_code})") from None
    finally:
        await asyncio.to_thread(child.join, 30)


class Replay:
    """A SamplingEngine that answers at once with samples recorded from the real engine
    (same seeds, same tokens), so a server over it costs only HTTP and JSON."""

    def __init__(self, engine: TorchEngine, samples: Mapping[int, Sample]) -> None:
        self.engine = engine
        self.samples = samples

    def served_models(self) -> list[str]:
        return self.engine.served_models()

    def render_chat(
        self,
        model: str,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
    ) -> list[int]:
        return self.engine.render_chat(model, messages, tools)

    def decode(self, model: str, token_ids: Sequence[int]) -> str:
        return self.engine.decode(model, token_ids)

    def token_text(self, model: str, token_id: int) -> str:
        return self.engine.token_text(model, token_id)

    async def sample(
        self, model: str, prompt_token_ids: Sequence[int], n: int, params: SamplingParams
    ) -> list[Sample]:
        assert params.seed is not None
        return [self.samples[params.seed]] * n

    async def close(self) -> None:
        return None


def best(total: int, timings: Timings) -> tuple[float, float]:
    """Completions/s of the fastest round, and its tokens/s. Every round uses the same
    seeds, so every round of every path produces the same tokens."""
    seconds, tokens = min(timings)
    return total / seconds, tokens / seconds


async def run(
    model_dir: str, device: str | None, plan: Plan
) -> dict[tuple[str, int], tuple[float, ...]]:
    """{(path, concurrency): (completions/s, tokens/s, rows per decode step)}."""
    import openai

    engine = TorchEngine(model_dir, device=device)
    await engine.load(MODEL, None)
    prompt = engine.render_chat(MODEL, MESSAGES, None)
    recorded: dict[int, Sample] = {}

    async def direct(seed: int) -> int:
        params = SamplingParams(max_tokens=MAX_TOKENS, temperature=TEMPERATURE, seed=seed)
        (sample,) = await engine.sample(MODEL, prompt, 1, params)
        recorded[seed] = sample
        return len(sample.token_ids)

    results: dict[tuple[str, int], tuple[float, ...]] = {}
    server = InferenceServer(engine, api_key=KEY)
    replay = InferenceServer(Replay(engine, recorded), api_key=KEY)
    try:
        base_url, replay_url = await server.start(), await replay.start()
        client = openai.AsyncOpenAI(base_url=base_url, api_key=KEY, max_retries=0)
        replay_client = openai.AsyncOpenAI(base_url=replay_url, api_key=KEY, max_retries=0)
        for concurrency in CONCURRENCY:
            for path in (DIRECT, SERVER, CHILD, HTTP_ONLY):
                steps, tokens = engine.steps_run, engine.tokens_run
                if path == DIRECT:
                    timings = await timed_rounds(direct, concurrency, plan)
                elif path == SERVER:
                    timings = await timed_rounds(served_call(client), concurrency, plan)
                elif path == CHILD:
                    timings = await in_child(base_url, concurrency, plan)
                else:
                    timings = await timed_rounds(served_call(replay_client), concurrency, plan)
                steps, tokens = engine.steps_run - steps, engine.tokens_run - tokens
                per_step = tokens / steps if steps else float("nan")
                results[path, concurrency] = (*best(plan.total(concurrency), timings), per_step)
        await client.close()
        await replay_client.close()
    finally:
        await replay.stop()
        await server.stop()
        await engine.close()
    return results


def small_model(directory: str) -> str:
    """A wider, deeper random Llama (about 20M parameters) with the tiny model's tokenizer:
    a model whose decode step costs real arithmetic on a CPU, unlike the tiny model's, whose
    cost is nearly all Python."""
    return tiny_model(os.path.join(directory, "small"), size="20M")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_inference")
    parser.add_argument(
        "--model",
        default=os.environ.get("ARTHEX_BENCH_MODEL", "tiny"),
        help="a local Hugging Face model directory, or 'tiny' (default) or 'small': random "
        "models made on the spot",
    )
    parser.add_argument("--device", default=os.environ.get("ARTHEX_BENCH_DEVICE"))
    args = parser.parse_args(argv or [])
    plan = TINY_PLAN if args.model == "tiny" else SMALL_PLAN
    with tempfile.TemporaryDirectory() as tmp:
        if args.model == "tiny":
            model_dir = tiny_model(os.path.join(tmp, "tiny"))
        elif args.model == "small":
            model_dir = small_model(tmp)
        else:
            model_dir = args.model
        results = asyncio.run(run(model_dir, args.device, plan))

    table: list[list[object]] = []
    for concurrency in CONCURRENCY:
        direct = results[DIRECT, concurrency][0]
        for path in (DIRECT, SERVER, CHILD, HTTP_ONLY):
            per_s, tokens_per_s, per_step = results[path, concurrency]
            versus_one = per_s / results[path, 1][0]
            table.append(
                [
                    path,
                    concurrency,
                    per_s,
                    tokens_per_s,
                    "-" if path == HTTP_ONLY else f"{per_step:.2f}",
                    f"{versus_one:.2f}x" if concurrency != 1 else "-",
                    f"{per_s / direct:.2f}" if path in (SERVER, CHILD) else "-",
                ]
            )
    label = {"tiny": "tiny model", "small": "small random model"}.get(
        args.model, os.path.basename(os.path.normpath(args.model))
    )
    print_table(
        f"Inference: {label}, {args.device or 'default device'}, {MAX_TOKENS} max tokens, "
        "closed-loop callers (targets: 8 vs 1 concurrent >= 3x through the server; "
        "server / direct >= 0.8)",
        [
            "path",
            "concurrent",
            "completions/s",
            "tokens/s",
            "rows per decode step",
            "vs 1 concurrent",
            "server / direct",
        ],
        table,
    )
    # Decoding and the HTTP work share one GIL in-process, so they add up: the bound on the
    # in-process ratio is decode / (decode + HTTP).
    rows = []
    for concurrency in CONCURRENCY:
        decode_ms = 1000 / results[DIRECT, concurrency][0]
        http_ms = 1000 / results[HTTP_ONLY, concurrency][0]
        rows.append([concurrency, decode_ms, http_ms, decode_ms / (decode_ms + http_ms)])
    print_table(
        "Inference: where a completion's time goes (ms per completion)",
        ["concurrent", "engine decode", "HTTP + openai client", "decode / (decode + HTTP)"],
        rows,
    )


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
