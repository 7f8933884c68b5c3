"""ART's inference fields on every model: `inference_base_url`, `inference_api_key`,
`inference_model_name`, and the `openai_client()` / `get_inference_name()` built on them.

A prompted (non-trainable) model points them at any OpenAI-compatible service to be
evaluated and logged like a trained one; a trainable model gets them from its backend at
`register`.

`pinned_serving(model_name, step)` pins a registered trainable model's inference to one step
for the code inside the block (this task and the tasks it starts): there
`get_inference_name()` names that step, not the latest, so a rollout started before a
training step finishes keeps sampling the policy it began with; `served_name` pins the exact
name to send instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING

import attrs

from .errors import InvalidInputError

if TYPE_CHECKING:
    from openai import AsyncOpenAI


@attrs.frozen
class ServingPin:
    """The step a model's inference is pinned to, and optionally the exact name to send."""

    step: int
    served_name: str | None = None

    def __attrs_post_init__(self) -> None:
        if isinstance(self.step, bool) or not isinstance(self.step, int) or self.step < 0:
            raise InvalidInputError(f"a pinned step must be an int >= 0, got {self.step!r}")
        if self.served_name is not None and (
            not isinstance(self.served_name, str) or not self.served_name
        ):
            raise InvalidInputError(
                f"a pinned served name must be a non-empty str, got {self.served_name!r}"
            )


_PINS: contextvars.ContextVar[Mapping[str, ServingPin]] = contextvars.ContextVar(
    "arthex_serving_pins", default=MappingProxyType({})
)


def serving_pin(model_name: str) -> ServingPin | None:
    """The pin on `model_name`'s inference here, if any."""
    return _PINS.get().get(model_name)


@contextlib.contextmanager
def pinned_serving(
    model_name: str, step: int, served_name: str | None = None
) -> Iterator[ServingPin]:
    """Within the block, `model_name`'s inference is pinned to `step` (see the module)."""
    if not isinstance(model_name, str) or not model_name:
        raise InvalidInputError(f"pin a model by its non-empty name, got {model_name!r}")
    pin = ServingPin(step, served_name)
    token = _PINS.set(MappingProxyType({**_PINS.get(), model_name: pin}))
    try:
        yield pin
    finally:
        _PINS.reset(token)


class InferenceTarget:
    inference_base_url: str | None
    inference_api_key: str | None
    _inference_model_name: str | None
    _client: AsyncOpenAI | None
    _client_loop: asyncio.AbstractEventLoop | None

    @property
    def name(self) -> str:
        raise NotImplementedError  # the model's

    def _init_inference(
        self, base_url: str | None, api_key: str | None, model_name: str | None
    ) -> None:
        self.inference_base_url = base_url
        self.inference_api_key = api_key
        self._inference_model_name = model_name
        self._client = None
        self._client_loop = None

    @property
    def inference_model_name(self) -> str | None:
        """The model name requests are sent with (None: the model's `name`)."""
        return self._served_name()

    @inference_model_name.setter
    def inference_model_name(self, value: str | None) -> None:
        self._inference_model_name = value

    def _served_name(self) -> str | None:
        return self._inference_model_name

    def get_inference_name(self, step: int | None = None) -> str:
        """The name to send: `inference_model_name` (or `name`), with `@{step}` for a step."""
        base = self._inference_model_name or self.name
        return base if step is None else f"{base}@{step}"

    def openai_client(self) -> AsyncOpenAI:
        """An `openai.AsyncOpenAI` for `inference_base_url` and `inference_api_key` (cached
        per event loop: a script's second `asyncio.run` gets a client of its own, as the
        first one's pooled connections ended with its loop)."""
        if self.inference_base_url is None or self.inference_api_key is None:
            raise InvalidInputError(
                f"model {self.name!r} has no inference endpoint: pass inference_base_url= and "
                "inference_api_key= (e.g. https://api.openai.com/v1 and your key)"
            )
        return self._client_for(self.inference_base_url, self.inference_api_key)

    def _client_for(self, base_url: str, api_key: str) -> AsyncOpenAI:
        loop = _running_loop()
        if loop is not None and self._client_loop not in (None, loop):
            # made on a loop that has ended (or another thread's)
            _retire(self._client, self._client_loop)
            self._client, self._client_loop = None, None
        if self._client is None:
            from openai import AsyncOpenAI  # the client class, not only the types

            self._client = AsyncOpenAI(base_url=base_url, api_key=api_key, timeout=1200.0)
        if self._client_loop is None:
            self._client_loop = loop
        return self._client

    async def _close_client(self) -> None:
        client, made_on = self._client, self._client_loop
        self._client, self._client_loop = None, None
        if client is not None and made_on in (None, _running_loop()):
            await client.close()
        elif client is not None and made_on is not None:
            _retire(client, made_on)


def _retire(client: AsyncOpenAI | None, made_on: asyncio.AbstractEventLoop) -> None:
    """Close a client of another loop now, not when it is collected: left open, openai's
    finaliser schedules its close on whatever loop runs then, where closing the first loop's
    pooled connections fails ("Event loop is closed") in a task no one awaits. On the loop
    that made it while that loop still runs; else here, where the pool's closing error is
    expected and dropped (the connections died with their loop)."""
    if client is None:
        return
    if made_on.is_running() and not made_on.is_closed():
        asyncio.run_coroutine_threadsafe(client.close(), made_on)
        return
    here = _running_loop()
    if here is not None:
        here.create_task(client.close()).add_done_callback(_drop_outcome)


def _drop_outcome(task: asyncio.Task[None]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved: the ended loop's connections could not be closed


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
