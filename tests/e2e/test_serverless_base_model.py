"""A run trained through `arthex serve` keeps its base model too: the client's register of a
trained run with another `base_model` is refused (the core's check, from the client's
`model.json` and history) before the client's run directory or the server changes. A real
server subprocess on loopback, the in-memory backend behind it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

import arthex
from arthex.adapters.serverless import ServerlessBackend
from arthex.core.errors import BaseModelChangedError
from arthex.testing.builders import synthetic_groups
from tests._serverless import start_server
from tests.unit.test_run_base_model import tree_digest

pytestmark = pytest.mark.e2e


def test_a_trained_serverless_run_refuses_another_base_model(tmp_path: Path) -> None:
    server = start_server(tmp_path / "state")
    try:
        _tenant, key = server.fresh_tenant()
        base_path = tmp_path / "client"

        def model(base_model: str) -> arthex.TrainableModel:
            return arthex.TrainableModel(
                name="agent",
                project="proj",
                base_model=base_model,
                base_path=str(base_path),
                report_metrics=[],
            )

        def listing() -> object:
            return httpx.get(
                server.url + "/preview/models", headers={"Authorization": f"Bearer {key}"}
            ).json()

        async def main() -> None:
            backend = ServerlessBackend(server.url, key)
            first = model("org/base-a")
            await first.register(backend)
            await first.train(synthetic_groups(), progress=False)
            await first.close()
            before, served = tree_digest(base_path / "proj" / "models" / "agent"), listing()
            with pytest.raises(BaseModelChangedError, match="'org/base-a', not 'org/base-b'"):
                await model("org/base-b").register(backend)
            assert tree_digest(base_path / "proj" / "models" / "agent") == before
            assert listing() == served
            await backend.close()

        asyncio.run(main())
    finally:
        server.stop()
