"""The vLLM engine follows a script's second `asyncio.run`, without vLLM installed.

`VllmShaped` stands in for vLLM's `AsyncLLM` where this needs it, as vLLM 0.26-0.33 is built
(vllm/v1/engine/async_llm.py and core_client.py): a core client whose socket reader task and
`asyncio.Queue` are made on the first loop that asks, an output handler task started by the
first request and only when none is held, outputs produced by another thread (the engine
core process). The same check against the real AsyncLLM runs on a GPU in
benchmarks/gpu/vllm_smoke.py (`second-asyncio-run`)."""

from __future__ import annotations

import asyncio
import queue
import threading

import attrs
import pytest

from arthex.adapters.inference.vllm_engine import VllmEngine
from arthex.adapters.inference.vllm_loop import follow_running_loop

WAIT_S = 10.0  # an answer takes milliseconds; a request no task collects waits forever


@attrs.define
class Resources:
    output_queue_task: asyncio.Task[None] | None = None


class CoreClient:
    """The multiprocess core client: requests out to a thread, outputs back through a socket
    reader task into `outputs_queue`."""

    def __init__(self) -> None:
        self.resources = Resources()
        self.outputs_queue: asyncio.Queue[str] = asyncio.Queue()
        self._socket: queue.Queue[str] = queue.Queue()
        self._requests: queue.Queue[str | None] = queue.Queue()
        self._core = threading.Thread(target=self._serve, daemon=True)
        self._core.start()

    def _serve(self) -> None:
        while (request := self._requests.get()) is not None:
            self._socket.put(f"answer to {request}")

    def _ensure_output_queue_task(self) -> None:
        if self.resources.output_queue_task is not None:
            return
        outputs, socket = self.outputs_queue, self._socket

        async def read() -> None:  # as zmq's asyncio socket: waits on the loop, not a thread
            while True:
                try:
                    outputs.put_nowait(socket.get_nowait())
                except queue.Empty:
                    await asyncio.sleep(0.001)

        self.resources.output_queue_task = asyncio.create_task(read())

    async def add_request_async(self, request: str) -> None:
        self._ensure_output_queue_task()
        self._requests.put(request)

    async def get_output_async(self) -> str:
        self._ensure_output_queue_task()
        return await self.outputs_queue.get()

    def shutdown(self) -> None:
        self._requests.put(None)
        self._socket.put("")


class VllmShaped:
    def __init__(self) -> None:
        self.engine_core = CoreClient()
        self.output_handler: asyncio.Task[None] | None = None
        self._waiting: dict[str, asyncio.Future[str]] = {}

    def _run_output_handler(self) -> None:
        if self.output_handler is not None:
            return
        core, waiting = self.engine_core, self._waiting

        async def handle() -> None:
            while True:
                answer = await core.get_output_async()
                future = waiting.pop(answer.removeprefix("answer to "), None)
                if future is not None and not future.done():
                    future.set_result(answer)

        self.output_handler = asyncio.create_task(handle())

    async def generate(self, request: str) -> str:
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._waiting[request] = future
        await self.engine_core.add_request_async(request)
        self._run_output_handler()
        return await future


async def ask(llm: VllmShaped, request: str) -> tuple[str, asyncio.AbstractEventLoop]:
    return await asyncio.wait_for(llm.generate(request), WAIT_S), asyncio.get_running_loop()


def test_a_second_asyncio_run_waits_forever_unless_the_engine_follows() -> None:
    llm = VllmShaped()
    try:
        answer, first = asyncio.run(ask(llm, "one"))
        assert answer == "answer to one" and first.is_closed()
        # the stand-in is faithful: without following, the second loop's request is never
        # answered (the handler and the reader are tasks of the ended loop)
        with pytest.raises(TimeoutError):
            asyncio.run(asyncio.wait_for(llm.generate("lost"), 0.5))

        async def followed(request: str, ended: asyncio.AbstractEventLoop) -> str:
            follow_running_loop(llm, ended)
            return (await ask(llm, request))[0]

        second_loop: list[asyncio.AbstractEventLoop] = []

        async def remember_loop() -> str:
            second_loop.append(asyncio.get_running_loop())
            return await followed("two", first)

        assert asyncio.run(remember_loop()) == "answer to two"
        assert asyncio.run(followed("three", second_loop[0])) == "answer to three"
    finally:
        llm.engine_core.shutdown()


def test_the_engine_follows_the_running_loop_with_its_own_waits() -> None:
    engine = VllmEngine("some/model", device="cuda:0")
    llm = VllmShaped()
    engine._engine = llm  # as `_attach` holds a started AsyncLLM

    async def serve(request: str) -> str:
        if engine._awake is None:
            engine._awake = asyncio.Event()
            engine._awake.set()
        engine._follow_loop()
        await asyncio.wait_for(engine._until_awake(), WAIT_S)  # its Event is this loop's
        return (await ask(llm, request))[0]

    try:
        assert [asyncio.run(serve(r)) for r in ("one", "two", "three")] == [
            "answer to one",
            "answer to two",
            "answer to three",
        ]
    finally:
        llm.engine_core.shutdown()


def test_a_loop_still_open_in_another_thread_is_left_alone() -> None:
    engine = VllmEngine("some/model", device="cuda:0")
    llm = VllmShaped()
    engine._engine = llm
    asked, release = threading.Event(), threading.Event()

    async def hold() -> None:
        engine._follow_loop()
        await ask(llm, "one")
        asked.set()
        await asyncio.to_thread(release.wait)

    thread = threading.Thread(target=asyncio.run, args=(hold(),))
    thread.start()
    try:
        assert asked.wait(WAIT_S)
        handler = llm.output_handler

        async def other() -> None:
            engine._follow_loop()

        asyncio.run(other())
        assert llm.output_handler is handler  # that loop still serves it
    finally:
        release.set()
        thread.join()
        llm.engine_core.shutdown()
