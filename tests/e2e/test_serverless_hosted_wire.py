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


def test_log_writes_the_models_groups_and_delete_removes_the_model_for_its_tenant_only(
    server: ServerProcess,
) -> None:
    import pyarrow.parquet as pq

    tenant, key = server.fresh_tenant()
    _, other_key = server.fresh_tenant()
    api = httpx.Client(base_url=server.url + "/v1", headers={"Authorization": f"Bearer {key}"})
    other = httpx.Client(
        base_url=server.url + "/v1", headers={"Authorization": f"Bearer {other_key}"}
    )
    body = {"project": "proj", "name": "gone", "base_model": "tiny", "return_existing": True}
    model_id = api.post("/preview/models", json=body).json()["id"]
    groups = [g.model_dump(mode="json") for g in synthetic_groups(n_groups=2, size=3)]
    log = {"model_id": model_id, "trajectory_groups": groups, "split": "val"}
    folder = server.state_dir / "backend" / tenant / "models" / model_id

    assert other.post(f"/preview/models/{model_id}/log", json=log).status_code == 404
    assert not folder.exists()
    logged = api.post(f"/preview/models/{model_id}/log", json=log)
    assert logged.status_code == 200, logged.text
    # the physical file: six trajectories at step 0 of the val split
    assert pq.read_table(folder / "trajectories" / "val" / "0000.parquet").num_rows == 6
    for bad in (
        {**log, "split": "../x"},
        {**log, "trajectory_groups": []},
        {**log, "model_id": "m"},
    ):
        assert api.post(f"/preview/models/{model_id}/log", json=bad).status_code in (400, 422)

    assert other.delete(f"/preview/models/{model_id}").status_code == 404
    assert api.get(f"/preview/models/{model_id}").status_code == 200 and folder.is_dir()
    deleted = api.delete(f"/preview/models/{model_id}")
    assert deleted.status_code == 200 and deleted.json()["deleted"] is True
    assert api.get(f"/preview/models/{model_id}").status_code == 404
    assert api.delete(f"/preview/models/{model_id}").status_code == 404
    assert not folder.exists()
    registry = (server.state_dir / "registry.json").read_text()
    assert model_id not in registry
    # the name is free again, and comes back as a fresh model at step 0
    again = api.post("/preview/models", json=body).json()
    assert again["id"] == model_id
    assert api.get(f"/preview/models/{model_id}/checkpoints").json()["step"] == 0
    api.close()
    other.close()
