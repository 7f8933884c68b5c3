"""The hosted API's register and checkpoint pages on `arthex serve` (the in-memory backend),
as a client other than arthex's sends them: `entity` is the key's tenant or nothing,
`return_existing: false` refuses a registered name, checkpoint pages follow `order`, `limit`
and `after`, and an SFT job that names a W&B artifact is refused in one line."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from arthex.adapters.serverless import ServerlessBackend
from arthex.core.config import TrainConfig
from arthex.core.identity import ModelSpec, RunRef
from arthex.testing.builders import synthetic_groups
from tests._serverless import ServerProcess, start_server

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    started = start_server(tmp_path_factory.mktemp("hosted") / "state")
    try:
        yield started
    finally:
        started.stop()


def test_register_checkpoint_pages_and_refusals(server: ServerProcess, tmp_path: Path) -> None:
    tenant, key = server.fresh_tenant()
    run = RunRef("proj", "run-1")

    async def train_twice() -> None:
        backend = ServerlessBackend(server.url, key)
        try:
            await backend.register(ModelSpec(run=run, base_model="tiny"))
            for _ in range(2):
                async for _ in backend.train_steps(run, synthetic_groups(), TrainConfig()):
                    pass
        finally:
            await backend.close()

    asyncio.run(train_twice())
    api = httpx.Client(base_url=server.url + "/v1", headers={"Authorization": f"Bearer {key}"})
    body = {"project": "proj", "name": "run-1", "base_model": "tiny", "return_existing": True}
    found = api.post("/preview/models", json={**body, "entity": tenant}).json()
    assert (found["entity"], found["name"], found["run_id"]) == (tenant, "run-1", found["id"])
    assert api.post("/preview/models", json={**body, "entity": "someone-else"}).status_code == 404
    refused = api.post("/preview/models", json={**body, "return_existing": False})
    assert refused.status_code in (400, 422) and "registered already" in refused.text

    path = f"/preview/models/{found['id']}/checkpoints"
    newest = api.get(path, params={"order": "desc", "limit": 1}).json()
    assert [c["step"] for c in newest["data"]] == [2] and newest["has_more"] is True
    first = api.get(path, params={"limit": 2}).json()
    assert [c["step"] for c in first["data"]] == [0, 1] and first["has_more"] is True
    rest = api.get(path, params={"after": first["data"][-1]["id"]}).json()
    assert [c["step"] for c in rest["data"]] == [2] and rest["has_more"] is False
    assert all(c["metrics"] == {} and isinstance(c["id"], str) for c in first["data"])
    assert api.get(path, params={"order": "up"}).status_code in (400, 422)

    sft = api.post(
        "/preview/sft-training-jobs",
        json={"model_id": found["id"], "training_data_url": "wandb-artifact:///t/p/d:v0"},
    )
    assert sft.status_code in (400, 422) and "training_data_url" in sft.text
    api.close()
