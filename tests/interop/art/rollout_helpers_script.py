"""Run ART's rollout helpers (ART's, or arthex's under `arthex.art`: the first argument names
the package) on the cases read as JSON from stdin, and print what each gave, as JSON:

- `openai`: each recorded stream (chunk dicts, built the way the openai SDK builds streamed
  chunks) through `consume_chat_completion_stream` (optionally stopped early by `on_chunk`,
  or requiring usage) and `consume_sync_chat_completion_stream`: the ChatCompletion's JSON,
  or which error it raised;
- `guided_completion`: `freeze_tool_schema` on (tool, arguments) and
  `get_guided_completion_params` on (teacher completion, tools);
- `gather`: `record_trajectory_completion_tokens` and `record_metrics` on trajectories,
  `wrap_group_awaitable` / `wrap_trajectories_awaitable` on a sequence of outcomes under a
  failure budget, and the sums a running `gather_trajectory_groups` holds when its rollouts
  record into `get_gather_context()`;
- `adapter_leases`: what `pinned_inference_step` and `pinned_inference_name` read at each
  level of nested pins, entering and leaving;
- `small`: `art.model`'s metric splits and sections, judge replies read by
  `art.rewards.ruler.Response`, and what `log_http_errors` makes of HTTP errors.

Run by ART's interpreter for ART; the interop test runs arthex's cases in its own process.
"""

import asyncio
import importlib
import json
import sys

from openai._models import construct_type
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.chat.chat_completion import Choice


class Recorded:
    """Chunks as the async client's stream gives them."""

    def __init__(self, chunks):
        self.chunks = [construct_type(type_=ChatCompletionChunk, value=c) for c in chunks]
        self.closed = False

    async def __aiter__(self):
        for chunk in self.chunks:
            yield chunk

    async def close(self):
        self.closed = True


class SyncRecorded(Recorded):
    """Chunks as the sync client's stream gives them."""

    def __iter__(self):
        return iter(self.chunks)

    def close(self):
        self.closed = True


def outcome(call):
    try:
        return {"completion": call().model_dump(mode="json", exclude_none=True)}
    except ValueError as error:
        incomplete = type(error).__name__ == "IncompleteChatCompletionStreamError"
        return {"error": "incomplete" if incomplete else "value"}


def stream(openai, case):
    seen = []
    stop_at = case.get("stop_at")

    def on_chunk(chunk, so_far):
        seen.append(so_far.choices[0].message.content if so_far.choices else None)
        if stop_at is not None and len(seen) >= stop_at:
            raise StopIteration

    recorded = Recorded(case["chunks"])
    usage = case.get("require_usage", False)
    done = outcome(
        lambda: asyncio.run(
            openai.consume_chat_completion_stream(recorded, on_chunk, require_usage=usage)
        )
    )
    synced = outcome(
        lambda: openai.consume_sync_chat_completion_stream(SyncRecorded(case["chunks"]))
    )
    return {"async": done, "sync": synced, "seen": seen, "closed": recorded.closed}


def streams(lib, cases):
    openai = importlib.import_module(f"{lib}.openai")
    return [stream(openai, case) for case in cases]


def guided(lib, cases):
    module = importlib.import_module(f"{lib}.guided_completion")
    frozen = [module.freeze_tool_schema(tool, args) for tool, args in cases["freeze"]]
    params = []
    for completion, tools in cases["teachers"]:
        teacher = ChatCompletion.model_validate(completion)
        params.append(list(module.get_guided_completion_params(teacher, tools)))
    return {"frozen": frozen, "params": params}


def trajectory(lib, spec):
    art = importlib.import_module(lib)

    def choice(tokens):
        extra = {} if tokens is None else {"art_completion_tokens": tokens}
        body = {"index": 0, "finish_reason": "stop", "message": {"role": "assistant"}}
        return Choice.model_validate({**body, **extra})

    extra = spec.get("extra", [])
    return art.Trajectory(
        reward=spec["reward"],
        metrics=dict(spec.get("metrics", {})),
        messages_and_choices=[
            {"role": "user", "content": "q"},
            *(choice(t) for t in spec.get("tokens", [])),
        ],
        additional_histories=[{"messages_and_choices": [choice(t) for t in extra]}]
        if extra
        else [],
    )


def gather(lib, cases):
    module = importlib.import_module(f"{lib}.gather")
    art = importlib.import_module(lib)
    built = [trajectory(lib, spec) for spec in cases["trajectories"]]
    for t in built:
        module.record_trajectory_completion_tokens(t)
    stamped = [t.metrics for t in built]
    context = module.GatherContext()
    for spec in cases["trajectories"]:
        module.record_metrics(context, trajectory(lib, spec))
    recorded = [dict(context.metric_sums), dict(context.metric_divisors)]

    async def group(rewards):
        if rewards is None:
            raise ValueError("rollout failed")
        return art.TrajectoryGroup([art.Trajectory(reward=r) for r in rewards])

    async def rollouts(rewards):
        if rewards is None:
            raise ValueError("rollout failed")
        return [art.Trajectory(reward=r) for r in rewards]

    async def wrapped(wrap, make, budget, sequence):
        results = []
        context = module.GatherContext(max_exceptions=budget)
        with module.set_gather_context(context):
            for rewards in sequence:
                try:
                    got = await wrap(make(rewards))
                except ValueError:
                    results.append("raised")
                    break
                if got is None or isinstance(got, BaseException):
                    results.append(None if got is None else type(got).__name__)
                else:
                    items = got if isinstance(got, list) else got.trajectories
                    results.append([t.reward for t in items])
        return results, dict(context.metric_sums), dict(context.metric_divisors)

    wraps = []
    for budget, sequence in cases["wraps"]:
        for wrap, make in (
            (module.wrap_group_awaitable, group),
            (module.wrap_trajectories_awaitable, rollouts),
        ):
            wraps.append(asyncio.run(wrapped(wrap, make, budget, sequence)))

    async def gathered(groups):
        held = []

        async def rollout(spec):
            t = art.Trajectory(reward=spec["reward"], metrics=dict(spec.get("metrics", {})))
            if spec.get("records"):
                context = module.get_gather_context()
                held.append(context)
                module.record_metrics(context, art.Trajectory(reward=spec["records"]))
            return art.TrajectoryGroup([t])

        await art.gather_trajectory_groups([rollout(spec) for spec in groups], pbar_desc=None)
        return [dict(held[0].metric_sums), dict(held[0].metric_divisors)]

    running = gathered(cases["running"])
    return {
        "stamped": stamped,
        "recorded": recorded,
        "wraps": wraps,
        "running": asyncio.run(running),
    }


def leases(lib, cases):
    module = importlib.import_module(f"{lib}.adapter_leases")
    models = cases["models"]

    def readback():
        return [
            [module.pinned_inference_step(m)]
            + [module.pinned_inference_name(m, s) for s in (None, 0, 1, 2)]
            for m in models
        ]

    async def nest(pins, seen):
        seen.append(readback())
        if not pins:
            return
        model, step, name = pins[0]
        if name is None:
            pin = module.pin_inference_step(model, step)
        else:
            pin = module.pin_inference_target(model, step=step, inference_name=name)
        async with pin:
            await nest(pins[1:], seen)
        seen.append(readback())

    seen = []
    asyncio.run(nest(cases["pins"], seen))
    return seen


def small(lib, cases):
    model = importlib.import_module(f"{lib}.model")
    ruler = importlib.import_module(f"{lib}.rewards.ruler")
    http = importlib.import_module(f"{lib}.utils.log_http_errors")
    import httpx

    def reworded(status, body):
        request = httpx.Request("POST", "http://trainer.test/v1/jobs")
        response = httpx.Response(status, content=body.encode(), request=request)

        @http.log_http_errors
        async def call():
            response.raise_for_status()

        try:
            asyncio.run(call())
        except httpx.HTTPStatusError:
            return "original"
        except Exception as error:
            return str(error)

    return {
        "splits": sorted(model.METRIC_SPLITS),
        "sections": sorted(model.METRIC_SECTIONS),
        "replies": [ruler.Response.model_validate_json(r).model_dump() for r in cases["replies"]],
        "http": [reworded(status, body) for status, body in cases["http"]],
    }


def run(lib, cases):
    return {
        "streams": streams(lib, cases["streams"]),
        "guided": guided(lib, cases["guided"]),
        "gather": gather(lib, cases["gather"]),
        "leases": leases(lib, cases["leases"]),
        "small": small(lib, cases["small"]),
    }


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1], json.load(sys.stdin))))
