"""vLLM's `AsyncLLM` moved onto a new event loop, for a script's second `asyncio.run`.

Kept apart from vllm_engine.py so that it imports nothing of vLLM: it only replaces what
vLLM bound to the loop that ended, by the attribute names of the tested releases
(`vllm_args.TESTED_VLLM`; tests/vllm_api checks they are still vLLM's).
"""

from __future__ import annotations

import asyncio
from typing import Any


def follow_running_loop(engine: Any, ended: asyncio.AbstractEventLoop) -> None:
    """Let a vLLM `AsyncLLM` serve from the running loop after `ended`, the loop it served
    on, has closed. AsyncLLM starts its output handler (the task that pulls the engine
    core's outputs into each request's queue) on the first request, and only when it holds
    none; its multiprocess core client starts its socket reader the same way and hands
    outputs over through an `asyncio.Queue`. Left as they are, the next loop's requests
    would wait for outputs no task collects, so the ended loop's tasks and the queue (bound
    to the loop that first waited on it) are replaced: vLLM starts new ones here."""
    handler = getattr(engine, "output_handler", None)
    if isinstance(handler, asyncio.Future) and handler.get_loop() is ended:
        engine.output_handler = None
    core: Any = getattr(engine, "engine_core", None)
    resources: Any = getattr(core, "resources", None)
    reader = getattr(resources, "output_queue_task", None)
    if isinstance(reader, asyncio.Future) and reader.get_loop() is ended:
        resources.output_queue_task = None
        if isinstance(getattr(core, "outputs_queue", None), asyncio.Queue):
            core.outputs_queue = asyncio.Queue()
        ensure = getattr(core, "_ensure_output_queue_task", None)
        if callable(ensure):  # started here, as vLLM does when a client is made on a loop
            ensure()
