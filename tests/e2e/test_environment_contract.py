"""The Environment contract of the kit against a small environment of this test's own (its
rollouts captured against LocalBackend's served tiny model), and a session scope recording a
call made over real HTTP from outside any capture context, keyed by its `X-Session-ID`."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("fastapi")

import httpx

import arthex
from arthex.core.capture.endpoints import EndpointFilter
from arthex.core.capture.scope import bind_session, close_session_scope, open_session_scope
from arthex.core.environments import Environment
from arthex.core.model import Model
from arthex.core.trajectories import Trajectory
from arthex.testing.contracts.environment import EnvironmentContract
from arthex.testing.serving import served_model
from arthex.testing.tiny_model import tiny_model

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


class Echo:
    """Asks the model to repeat a word; the reward is whether the reply contains it."""

    WORDS = ("apple", "river", "stone")

    def scenarios(self, split: str) -> Sequence[str]:
        return list(self.WORDS)

    async def rollout(self, model: Model, scenario: str) -> Trajectory:
        assert model.inference_base_url and model.inference_api_key
        from openai import AsyncOpenAI

        async with (
            AsyncOpenAI(
                base_url=model.inference_base_url, api_key=model.inference_api_key, max_retries=0
            ) as client,
            arthex.capture(endpoints=[model.inference_base_url]) as trajectory,
        ):
            reply = await client.chat.completions.create(
                model=model.get_inference_name(), max_tokens=5, logprobs=True,
                messages=[{"role": "user", "content": f"Say {scenario}."}],
            )  # fmt: skip
        trajectory.reward = float(scenario in (reply.choices[0].message.content or ""))
        return trajectory


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    return tiny_model(tmp_path_factory.getbasetemp() / "tiny-model")


def served(tiny: str, root: Path) -> AbstractAsyncContextManager[Model]:
    return served_model(tiny, root, name="echo", project="contract")


class TestOwnEnvironment(EnvironmentContract):
    @pytest.fixture(autouse=True)
    def _where(self, tiny: str, tmp_path: Path) -> None:
        self.tiny, self.root = tiny, tmp_path

    def environment(self) -> Environment[Any]:
        return Echo()

    def serve(self) -> AbstractAsyncContextManager[Model]:
        return served(self.tiny, self.root)


def test_a_session_scope_records_a_call_sent_from_outside_its_context(
    tiny: str, tmp_path: Path
) -> None:
    async def main() -> tuple[Trajectory, list[int]]:
        async with served(tiny, tmp_path) as model:
            assert model.inference_base_url and model.inference_api_key
            url = model.inference_base_url.rstrip("/") + "/chat/completions"
            body = {"model": model.get_inference_name(), "max_tokens": 4, "logprobs": True,
                    "messages": [{"role": "user", "content": "Hi"}]}  # fmt: skip
            auth = {"Authorization": f"Bearer {model.inference_api_key}"}
            scope = open_session_scope(None, EndpointFilter([model.inference_base_url]))
            bind_session(scope, "trace-7")

            async def relay(session: str | None) -> dict[str, Any]:
                headers = {**auth, **({"X-Session-ID": session} if session else {})}
                async with httpx.AsyncClient(timeout=60) as client:
                    reply = await client.post(url, json=body, headers=headers)
                reply.raise_for_status()
                result: dict[str, Any] = reply.json()
                return result

            # in another thread's event loop: no context variable of this task reaches it
            ours = await asyncio.to_thread(asyncio.run, relay("trace-7"))
            await asyncio.to_thread(asyncio.run, relay("trace-8"))
            await asyncio.to_thread(asyncio.run, relay(None))
            close_session_scope(scope, None)
            return scope.trajectory, list(ours["choices"][0]["token_ids"])

    trajectory, sampled = asyncio.run(main())
    (exchange,) = trajectory.exchanges.chat_completions
    assert (exchange.response.choices[0].model_extra or {})["token_ids"] == sampled
