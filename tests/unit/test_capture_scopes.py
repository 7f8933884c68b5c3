"""Capture scopes on real httpx and openai clients (a scripted transport, no sockets): what is
recorded, into which scope, and what is left alone."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Coroutine
from typing import Any

import httpx
import httpx2
import pytest
from openai import AsyncOpenAI, OpenAI

import arthex
import arthex.art as art
from arthex.core.capture.endpoints import register_endpoint
from arthex.core.capture.scope import SKIPPED_METRIC
from arthex.core.errors import InvalidInputError
from arthex.core.trajectories import INCOMPLETE_KEY, Trajectory
from tests._chat_script import ChatScript

BASE = "http://agent.test/v1"
OTHER = "http://judge.test/v1"


def echo(request: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    return f"re:{request['messages'][-1]['content']}", []


def client(script: ChatScript, base: str = BASE) -> AsyncOpenAI:
    return AsyncOpenAI(
        base_url=base, api_key="k", http_client=httpx2.AsyncClient(transport=script.transport())
    )


async def ask(openai: AsyncOpenAI, text: str) -> str:
    response = await openai.chat.completions.create(
        model="agent@0", messages=[{"role": "user", "content": text}], logprobs=True
    )
    return response.choices[0].message.content or ""


def asked(trajectory: Trajectory) -> list[str]:
    return [e.request["messages"][-1]["content"] for e in trajectory.exchanges.chat_completions]


def run(coroutine: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coroutine)


def test_a_scope_records_each_call_with_its_request_and_full_response() -> None:
    script = ChatScript(echo)

    async def main() -> Trajectory:
        openai = client(script)
        await ask(openai, "before")
        async with arthex.capture(endpoints=[BASE]) as trajectory:
            assert await ask(openai, "one") == "re:one"
            await ask(openai, "two")
        await ask(openai, "after")
        return trajectory

    trajectory = run(main())
    assert asked(trajectory) == ["one", "two"]
    first = trajectory.exchanges.chat_completions[0]
    assert first.request["logprobs"] is True and first.request["model"] == "agent@0"
    sent = script.sampled[1]  # the server's own record of the second call it answered
    assert first.response.choices[0].model_extra == {"token_ids": sent["choices"][0]["token_ids"]}
    assert (first.response.model_extra or {})["prompt_token_ids"] == sent["prompt"]
    assert first.start_time <= first.end_time
    assert not trajectory.incomplete and trajectory.metrics["duration"] >= 0


def test_only_watched_endpoints_are_recorded() -> None:
    agent, judge = ChatScript(echo), ChatScript(echo)

    async def main() -> tuple[Trajectory, Trajectory]:
        async with arthex.capture(endpoints=[BASE]) as watched:
            await ask(client(agent), "agent")
            await ask(client(judge, OTHER), "judge")
        async with arthex.capture(endpoints="any") as everything:
            await ask(client(agent), "agent")
            await ask(client(judge, OTHER), "judge")
        return watched, everything

    watched, everything = run(main())
    assert asked(watched) == ["agent"]
    assert asked(everything) == ["agent", "judge"]


def test_a_registered_endpoint_is_watched_by_default_under_any_loopback_name() -> None:
    script = ChatScript(echo)
    register_endpoint("http://127.0.0.1:59999/v1")

    async def main() -> Trajectory:
        async with arthex.capture() as trajectory:
            await ask(client(script, "http://localhost:59999/v1/"), "framework client")
            await ask(client(script, "http://127.0.0.1:59998/v1"), "another port")
        return trajectory

    assert asked(run(main())) == ["framework client"]


def test_nested_scopes_never_share_a_call() -> None:
    script = ChatScript(echo)

    async def main() -> tuple[Trajectory, Trajectory]:
        openai = client(script)
        async with arthex.capture(endpoints=[BASE]) as outer:
            await ask(openai, "outer 1")
            async with arthex.capture(endpoints=[BASE]) as inner:
                await ask(openai, "inner")
                assert arthex.current_trajectory() is inner
            await ask(openai, "outer 2")
            assert arthex.current_trajectory() is outer
        assert arthex.current_trajectory() is None
        return outer, inner

    outer, inner = run(main())
    assert asked(outer) == ["outer 1", "outer 2"]
    assert asked(inner) == ["inner"]


def test_concurrent_scopes_keep_their_own_calls_while_interleaved() -> None:
    """Eight rollouts, one client: each call waits at a barrier until all eight are in flight,
    so the calls interleave on the wire; every scope still holds exactly its own three."""
    barrier: asyncio.Barrier | None = None

    class Interleaving(httpx2.AsyncBaseTransport):
        def __init__(self, script: ChatScript) -> None:
            self.inner: httpx2.MockTransport = script.transport()

        async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
            assert barrier is not None
            await barrier.wait()
            return await self.inner.handle_async_request(request)

    script = ChatScript(echo)

    async def rollout(openai: AsyncOpenAI, n: int) -> Trajectory:
        async with arthex.capture(endpoints=[BASE]) as trajectory:
            for turn in range(3):
                await ask(openai, f"rollout {n} turn {turn}")
        return trajectory

    async def main() -> list[Trajectory]:
        nonlocal barrier
        barrier = asyncio.Barrier(8)
        transport = Interleaving(script)
        openai = AsyncOpenAI(
            base_url=BASE, api_key="k", http_client=httpx2.AsyncClient(transport=transport)
        )
        return await asyncio.gather(*(rollout(openai, n) for n in range(8)))

    trajectories = run(main())
    for n, trajectory in enumerate(trajectories):
        assert asked(trajectory) == [f"rollout {n} turn {t}" for t in range(3)]


def test_tasks_and_threads_started_inside_a_scope_record_into_it() -> None:
    script = ChatScript(echo)

    def sync_agent() -> None:
        with OpenAI(
            base_url=BASE, api_key="k", http_client=httpx2.Client(transport=script.transport())
        ) as openai:
            openai.chat.completions.create(
                model="agent@0", messages=[{"role": "user", "content": "thread"}]
            )

    async def main() -> Trajectory:
        openai = client(script)
        async with arthex.capture(endpoints=[BASE]) as trajectory:
            await asyncio.create_task(ask(openai, "task"))
            await asyncio.to_thread(sync_agent)
        return trajectory

    assert sorted(asked(run(main()))) == ["task", "thread"]


def test_no_capture_hides_a_region_and_a_scope_inside_it_records_again() -> None:
    script = ChatScript(echo)

    async def main() -> tuple[Trajectory, Trajectory]:
        openai = client(script)
        async with arthex.capture(endpoints=[BASE]) as outer:
            await ask(openai, "kept")
            with arthex.no_capture():
                await ask(openai, "hidden")
                assert arthex.current_trajectory() is None
                async with arthex.capture(endpoints=[BASE]) as inside:
                    await ask(openai, "inside")
            await ask(openai, "kept again")
        return outer, inside

    outer, inside = run(main())
    assert asked(outer) == ["kept", "kept again"]
    assert asked(inside) == ["inside"]


def test_a_crash_keeps_the_completed_calls_flagged_incomplete() -> None:
    script = ChatScript(echo)
    holder: list[Trajectory] = []

    async def main() -> None:
        openai = client(script)
        async with arthex.capture(endpoints=[BASE]) as trajectory:
            holder.append(trajectory)
            await ask(openai, "turn 1")
            raise KeyError("tool exploded")

    with pytest.raises(KeyError, match="tool exploded"):
        run(main())
    (trajectory,) = holder
    assert asked(trajectory) == ["turn 1"]
    assert trajectory.incomplete
    assert trajectory.metadata[INCOMPLETE_KEY] is True
    assert "KeyError" in str(trajectory.metadata["capture_error"])


def test_a_group_keeps_input_order_and_crashed_rollouts_as_exceptions_with_their_calls() -> None:
    script = ChatScript(echo)

    async def agent(openai: AsyncOpenAI, n: int) -> str:
        answer = await ask(openai, f"q{n}")
        if n == 1:
            raise RuntimeError("agent crashed after one call")
        await ask(openai, f"q{n} again")
        return answer

    async def main() -> arthex.TrajectoryGroup:
        openai = client(script)
        return await arthex.capture_trajectory_group(
            (agent(openai, n) for n in range(3)),
            reward=lambda answer: float(answer == "re:q2"),
            endpoints=[BASE],
            metadata={"scenario": "s"},
        )

    group = run(main())
    assert [asked(t) for t in group.trajectories] == [["q0", "q0 again"], ["q2", "q2 again"]]
    assert [t.reward for t in group.trajectories] == [0.0, 1.0]
    (error,) = group.exceptions
    assert error.type == "RuntimeError" and error.trajectory is not None
    assert error.trajectory.incomplete and asked(error.trajectory) == ["q1"]
    assert group.metadata == {"scenario": "s"}


def test_capture_trajectory_returns_the_scope_and_rewards_the_result() -> None:
    script = ChatScript(echo)

    async def main() -> Trajectory:
        return await arthex.capture_trajectory(
            ask(client(script), "x"), reward=lambda answer: 0.5 if answer == "re:x" else 0.0,
            endpoints=[BASE],
        )  # fmt: skip

    trajectory = run(main())
    assert asked(trajectory) == ["x"] and trajectory.reward == 0.5


def test_the_decorator_form_returns_a_trajectory_per_call() -> None:
    script = ChatScript(echo)

    @arthex.capture(endpoints=[BASE])
    async def rollout(text: str) -> None:
        await ask(client(script), text)
        trajectory = arthex.current_trajectory(require=True)
        assert trajectory is not None
        trajectory.reward = 2.0

    @arthex.capture(endpoints=[BASE])
    def sync_rollout(text: str) -> None:
        OpenAI(
            base_url=BASE, api_key="k", http_client=httpx2.Client(transport=script.transport())
        ).chat.completions.create(model="m", messages=[{"role": "user", "content": text}])

    async def main() -> list[Trajectory]:
        return list(await asyncio.gather(rollout("a"), rollout("b")))

    first, second = run(main())
    assert asked(first) == ["a"] and asked(second) == ["b"] and first.reward == 2.0
    assert asked(sync_rollout("c")) == ["c"]


def test_failed_and_streamed_calls_are_not_recorded_and_the_agent_still_works(
    caplog: pytest.LogCaptureFixture,
) -> None:
    script = ChatScript(echo)

    def streaming(request: httpx2.Request) -> httpx2.Response:
        delta = {"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}
        chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
                 "choices": [delta]}  # fmt: skip
        body = f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n"
        return httpx2.Response(200, text=body, headers={"content-type": "text/event-stream"})

    async def main() -> tuple[Trajectory, str]:
        openai = client(script)
        async with arthex.capture(endpoints=[BASE]) as trajectory:
            script.status = 500
            with pytest.raises(Exception, match="scripted failure"):
                await openai.with_options(max_retries=0).chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "boom"}]
                )
            script.status = 200
            streamer = AsyncOpenAI(
                base_url=BASE, api_key="k",
                http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(streaming)),
            )  # fmt: skip
            text = ""
            async for chunk in await streamer.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "s"}], stream=True
            ):
                text += chunk.choices[0].delta.content or ""
        return trajectory, text

    with caplog.at_level(logging.WARNING, logger="arthex.capture"):
        trajectory, text = run(main())
    assert text == "hi"
    assert not trajectory.exchanges
    assert trajectory.metrics[SKIPPED_METRIC] == 1
    assert "streamed" in caplog.text


def test_bad_arguments_are_refused_before_anything_runs() -> None:
    with pytest.raises(InvalidInputError, match="base URLs"):
        arthex.capture(endpoints="http://x/v1")
    with pytest.raises(InvalidInputError, match="http"):
        arthex.capture(endpoints=["ftp://x"])
    legacy = Trajectory(messages_and_choices=[{"role": "user", "content": "x"}])
    with (
        pytest.raises(InvalidInputError, match="fresh Trajectory"),
        arthex.capture(trajectory=legacy),
    ):
        pass

    async def main() -> None:
        task = asyncio.ensure_future(asyncio.sleep(0))
        with pytest.raises(InvalidInputError, match="un-awaited coroutines"):
            await arthex.capture_trajectory(task)  # type: ignore[arg-type]
        await task

    run(main())
    scope = arthex.capture()
    with scope, pytest.raises(InvalidInputError, match="entered once"), scope:
        pass


def test_a_client_of_the_other_httpx_family_is_recorded_too() -> None:
    """A framework that posts with plain httpx (not the SDK's httpx2) is recorded as well."""
    script = ChatScript(echo)
    body = {"model": "m", "messages": [{"role": "user", "content": "raw"}]}

    async def main() -> Trajectory:
        raw = httpx.AsyncClient(transport=script.transport(httpx))
        async with raw, arthex.capture(endpoints=[BASE]) as trajectory:
            response = await raw.post(f"{BASE}/chat/completions", json=body)
            assert response.json()["choices"][0]["message"]["content"] == "re:raw"
        return trajectory

    sync_body = {**body, "messages": [{"role": "user", "content": "sync raw"}]}
    raw = httpx.Client(transport=script.transport(httpx))
    with raw, arthex.capture(endpoints=[BASE]) as sync_trajectory:
        raw.post(f"{BASE}/chat/completions", json=sync_body)
    assert asked(run(main())) == ["raw"]
    assert asked(sync_trajectory) == ["sync raw"]


def test_a_group_takes_its_rollouts_when_called_so_a_loop_variable_is_kept() -> None:
    script = ChatScript(echo)

    async def main() -> list[arthex.TrajectoryGroup]:
        openai = client(script)
        pending = [
            arthex.capture_trajectory_group((ask(openai, task) for _ in range(2)), endpoints=[BASE])
            for task in ("first", "second")
        ]
        return list(await asyncio.gather(*pending))

    first, second = run(main())
    assert [asked(t) for t in first.trajectories] == [["first"], ["first"]]
    assert [asked(t) for t in second.trajectories] == [["second"], ["second"]]


def test_arts_trajectory_form_records_the_calls_whatever_the_coroutine_returns() -> None:
    """`art.trajectory(coroutine)`: every call to any endpoint, the coroutine's own return value
    (even a Trajectory) not the result, no reward set, a raised error passed on."""

    script = ChatScript(echo)

    async def agent(text: str) -> Trajectory:
        openai = client(script, OTHER)  # not registered, not named: ART records it anyway
        await ask(openai, text)
        await ask(openai, text + "!")
        return Trajectory(messages_and_choices=[], reward=9.0)

    async def broken() -> None:
        await ask(client(script), "half")
        raise ValueError("the tool broke")

    trajectory = run(art.trajectory(agent("hi")))
    assert asked(trajectory) == ["hi", "hi!"] and trajectory.reward == 0.0
    with pytest.raises(ValueError, match="the tool broke"):
        run(art.trajectory(broken()))
    with pytest.raises(InvalidInputError, match=r"^capture_calls takes un-awaited coroutines"):
        run(art.trajectory(agent))  # type: ignore[arg-type]  # the function, not a call
