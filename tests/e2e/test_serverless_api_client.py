"""arthex's hosted-API client (`arthex.art.serverless.client.Client`, ART's shape) against a
real `arthex serve --backend local` on loopback with the tiny model: models are created,
found again and refused a second time; groups are logged into the model's folder on the
server; a training job trains one step and its events list in order, whole, by page, and
after a cursor; checkpoints list by page in both orders and are deleted; and each refused
call raises arthex's error for the server's answer. The server's own files are the oracle."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from arthex.adapters.serverless.errors import ServerlessAuthError
from arthex.art.serverless.client import (
    Checkpoint,
    Client,
    DeleteCheckpointsResponse,
    Model,
    TrainingJob,
    TrainingJobEvent,
)
from arthex.core.errors import InvalidInputError, NotRegisteredError
from arthex.core.trajectories import Trajectory, TrajectoryGroup
from arthex.testing.builders import sampled_choice
from tests._serverless import ServerProcess, local_tiny_server

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

NOWHERE_MODEL = "m" + "0" * 24  # well formed, never registered
NOWHERE_JOB = "j" + "0" * 24


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from local_tiny_server(tmp_path_factory, "api")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory, server: ServerProcess) -> str:
    from arthex.testing.tiny_model import tiny_model

    return tiny_model(tmp_path_factory.getbasetemp() / "tiny-model")


def groups() -> list[TrajectoryGroup]:
    """Two groups of sampled choices (token ids and logprobs, as a server returns them) with
    unequal rewards: something to learn."""
    return [
        TrajectoryGroup(
            [
                Trajectory(
                    messages_and_choices=[
                        {"role": "user", "content": prompt},
                        sampled_choice(
                            answer,
                            prompt_token_ids=[1, 11 + g, 12, 13],
                            token_ids=[20 + g + i, 30 + i],
                            logprobs=[-1.0, -0.5],
                        ),
                    ],
                    reward=reward,
                )
                for i, (answer, reward) in enumerate((("yes", 1.0), ("no", 0.0), ("maybe", 0.5)))
            ]
        )
        for g, prompt in enumerate(("Say yes", "Say no"))
    ]


def registry(server: ServerProcess, tenant: str) -> list[dict[str, Any]]:
    models = json.loads((server.state_dir / "registry.json").read_text())["models"]
    return [m for m in models if m["tenant"] == tenant]


def model_dir(server: ServerProcess, tenant: str, model_id: str) -> Path:
    return server.state_dir / "backend" / tenant / "models" / model_id


def checkpoint_folders(server: ServerProcess, tenant: str, model_id: str) -> list[str]:
    return sorted(p.name for p in (model_dir(server, tenant, model_id) / "checkpoints").iterdir())


def client_of(server: ServerProcess, key: str) -> Client:
    return Client(api_key=key, base_url=server.url + "/v1")


def test_models_are_created_found_again_and_refused_a_second_time(
    server: ServerProcess, tiny: str
) -> None:
    tenant, key = server.fresh_tenant()

    async def main() -> tuple[Model, Model, InvalidInputError]:
        async with client_of(server, key) as client:
            made = await client.models.create(project="proj", name="agent", base_model=tiny)
            again = await client.models.create(
                project="proj", name="agent", base_model=tiny, return_existing=True
            )
            with pytest.raises(InvalidInputError, match="registered already") as refused:
                await client.models.create(project="proj", name="agent", base_model=tiny)
            return made, again, refused.value

    made, again, _ = asyncio.run(main())
    (record,) = registry(server, tenant)
    assert isinstance(made, Model) and made == again
    assert (made.id, made.entity, made.project, made.name, made.base_model, made.run_id) == (
        record["id"], tenant, "proj", "agent", tiny, record["id"],
    )  # fmt: skip
    assert made.model_extra is not None and made.model_extra["object"] == "model"


def test_logged_groups_land_in_the_models_folder_on_the_server(
    server: ServerProcess, tiny: str
) -> None:
    import pyarrow.parquet as pq

    tenant, key = server.fresh_tenant()

    async def main() -> str:
        async with client_of(server, key) as client:
            model = await client.models.create(project="proj", name="log", base_model=tiny)
            await client.models.log(model_id=model.id, trajectory_groups=groups(), split="val")
            return model.id

    model_id = asyncio.run(main())
    written = model_dir(server, tenant, model_id) / "trajectories" / "val" / "0000.parquet"
    table = pq.read_table(written)
    assert table.num_rows == 6
    assert sorted(table.column("reward").to_pylist()) == [0.0, 0.0, 0.5, 0.5, 1.0, 1.0]


def test_a_job_trains_a_step_its_events_list_in_order_and_checkpoints_list_and_delete(
    server: ServerProcess, tiny: str
) -> None:
    tenant, key = server.fresh_tenant()

    async def main() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with client_of(server, key) as client:
            model = await client.models.create(project="proj", name="train", base_model=tiny)
            job = await client.training_jobs.create(
                model_id=model.id,
                trajectory_groups=groups(),
                experimental_config={"learning_rate": 1e-3},
            )
            seen["job"] = job
            # follow the job as ART's ServerlessBackend does: list after the last event seen
            polled: list[TrainingJobEvent] = []
            while not polled or polled[-1].type not in ("training_ended", "training_failed"):
                after = polled[-1].id if polled else None
                polled += [
                    e async for e in client.training_jobs.events.list(
                        training_job_id=job.id, after=after
                    )
                ]  # fmt: skip
                await asyncio.sleep(0.2)
            seen["polled"] = polled
            events = client.training_jobs.events
            seen["whole"] = [e async for e in events.list(training_job_id=job.id)]
            first = await events.list(training_job_id=job.id, limit=1)
            seen["pages"] = [[e.id for e in page.data] async for page in first.iter_pages()]
            seen["after_1"] = [e.id async for e in events.list(training_job_id=job.id, after="1")]
            checkpoints = client.models.checkpoints
            seen["steps"] = [c.step async for c in checkpoints.list(model_id=model.id)]
            newest = await checkpoints.list(model_id=model.id, limit=1, order="desc")
            seen["newest"] = (newest.data, newest.has_more, newest.has_next_page())
            older = await newest.get_next_page()
            seen["older"] = ([c.step for c in older.data], older.has_next_page())
            seen["folders_before"] = checkpoint_folders(server, tenant, model.id)
            seen["deleted"] = await checkpoints.delete(model_id=model.id, steps=iter([0, 5]))
            seen["steps_after"] = [c.step async for c in checkpoints.list(model_id=model.id)]
            seen["model_id"] = model.id
        return seen

    seen = asyncio.run(main())
    assert isinstance(seen["job"], TrainingJob) and seen["job"].id.startswith("j")
    polled: list[TrainingJobEvent] = seen["polled"]
    types = [e.type for e in polled]
    assert types[0] == "training_started" and types[-1] == "training_ended", types
    assert set(types[1:-1]) == {"gradient_step"}
    assert [e.id for e in polled] == [str(i) for i in range(1, len(polled) + 1)]
    assert "loss/train" in polled[1].data or "loss" in polled[1].data, polled[1].data
    assert seen["whole"] == polled  # one listing of a finished job: every event, once
    assert seen["pages"] == [[e.id] for e in polled]  # a page of one per event
    assert seen["after_1"] == [e.id for e in polled[1:]]

    assert seen["folders_before"] == ["0000", "0001"]  # the server's files: steps 0 and 1
    assert seen["steps"] == [0, 1]
    (newest,), has_more, has_next = seen["newest"]
    assert isinstance(newest, Checkpoint) and newest.step == 1 and has_more and has_next
    assert newest.id == f"{seen['model_id']}-step1"
    assert seen["older"] == ([0], False)
    deleted: DeleteCheckpointsResponse = seen["deleted"]
    assert (deleted.deleted_count, deleted.not_found_steps) == (1, [5])
    assert seen["steps_after"] == [1]
    assert checkpoint_folders(server, tenant, seen["model_id"]) == ["0001"]


def test_refused_calls_raise_arthexs_error_for_the_servers_answer(
    server: ServerProcess, tiny: str
) -> None:
    tenant, key = server.fresh_tenant()
    _, other_key = server.fresh_tenant()

    async def main() -> None:
        async with client_of(server, key) as client, client_of(server, other_key) as other:
            model = await client.models.create(project="proj", name="errors", base_model=tiny)
            checkpoints = client.models.checkpoints
            with pytest.raises(NotRegisteredError, match=NOWHERE_MODEL):
                await checkpoints.list(model_id=NOWHERE_MODEL)
            with pytest.raises(NotRegisteredError):  # another tenant's model is not there
                await other.models.delete(model_id=model.id)
            with pytest.raises(NotRegisteredError, match=NOWHERE_JOB):
                await client.training_jobs.events.list(training_job_id=NOWHERE_JOB)
            with pytest.raises(InvalidInputError, match="steps"):
                await checkpoints.delete(model_id=model.id, steps=[-1])
            with pytest.raises(InvalidInputError, match="training_data_url"):
                await client.sft_training_jobs.create(
                    model_id=model.id, training_data_url="wandb-artifact:///e/p/data:latest"
                )
            with pytest.raises(InvalidInputError, match="empty list of trajectory_groups"):
                await client.models.log(model_id=model.id, trajectory_groups=[], split="val")
            with pytest.raises(
                InvalidInputError, match=r"split '\.\./x' is not a safe path segment"
            ):
                await client.models.log(model_id=model.id, trajectory_groups=groups(), split="../x")
            # refused here, before any request: an id that is not one path segment, a bad limit
            with pytest.raises(InvalidInputError, match="model_id must be an id"):
                client.models.checkpoints.list(model_id="../../backend")
            with pytest.raises(InvalidInputError, match="limit must be an integer >= 1"):
                checkpoints.list(model_id=model.id, limit=0)
            await client.models.delete(model_id=model.id)
            with pytest.raises(NotRegisteredError):
                await checkpoints.list(model_id=model.id)

        bad = Client(api_key="key-that-is-no-key", base_url=server.url + "/v1")
        try:
            with pytest.raises(ServerlessAuthError, match="refused the API key"):
                await bad.models.create(project="proj", name="x", base_model=tiny)
        finally:
            await bad.close()

    asyncio.run(main())
    assert registry(server, tenant) == []  # the deleted model is gone from the server


def test_the_client_reads_its_key_and_url_as_arthexs_serverless_backend_does(
    server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ARTHEX_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("ARTHEX_SERVERLESS_URL", raising=False)
    with pytest.raises(InvalidInputError, match="Client needs an API key"):
        Client()
    monkeypatch.setenv("WANDB_API_KEY", "hosted-key")
    hosted = Client()
    assert (hosted.api_key, hosted.base_url) == ("hosted-key", "https://api.training.wandb.ai/v1/")
    _, key = server.fresh_tenant()
    monkeypatch.setenv("ARTHEX_API_KEY", key)
    monkeypatch.setenv("ARTHEX_SERVERLESS_URL", server.url)  # a bare root gets /v1

    async def ask() -> None:
        async with Client() as client:
            assert (client.api_key, client.base_url) == (key, server.url + "/v1/")
            # the key was taken (a refused key is ServerlessAuthError): the model is unknown
            with pytest.raises(NotRegisteredError):
                await client.models.checkpoints.list(model_id=NOWHERE_MODEL)

    asyncio.run(ask())
