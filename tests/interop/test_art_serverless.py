"""ART 0.5.23's own `ServerlessBackend`, unmodified, trains on `arthex serve --backend local`
(the tiny model on CPU): it registers, rolls out through `model.openai_client()` under
`model.get_inference_name()` (the hosted service's `wandb-artifact:///...` names, step pins
through `adapter_lease`), trains, logs, reads the step, deletes checkpoints, logs a group
through its client's `models.log` and deletes the model; the server's files say what
happened. Then arthex's own ServerlessBackend runs the same script against the same server,
and the requests both clients made (method, path, JSON field names) are one set.

ART's `train_sft` is not run: its client uploads the data to W&B artifacts and sends the
server a `wandb-artifact:///` URL, which a server with no W&B account cannot read
(docs/serverless.md says what arthex's client sends instead).
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import arthex.art as art
from arthex.art.serverless.backend import ServerlessBackend
from arthex.testing.tiny_model import tiny_model
from tests._serverless import ServerProcess, launch_server

from .art_env import SCRIPTS, art_environment, art_python

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PROMPTS = ["Say a", "Say b"]
LEASE_PATH = re.compile(r".*/lease$")  # arthex's one-trainer lease: its own extension


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    pending = launch_server(tmp_path_factory.mktemp("wire") / "state", backend="local")
    started = pending.wait()
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    return tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def run_arts_client(server: ServerProcess, key: str, tiny: str, base_path: Path) -> Any:
    given = {"base_url": server.url + "/v1", "api_key": key, "base_model": tiny,
             "base_path": str(base_path)}  # fmt: skip
    done = subprocess.run(
        [str(art_python()), str(SCRIPTS / "serverless_client.py")],
        input=json.dumps(given), capture_output=True, text=True, env=art_environment(),
        timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-6000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # ART prints notes before it


def checkpoint_folders(server: ServerProcess, tenant: str, model_id: str) -> list[str]:
    folder = server.state_dir / "backend" / tenant / "models" / model_id / "checkpoints"
    return sorted(p.name for p in folder.iterdir())


def template(path: str) -> str:
    return re.sub(r"/j[0-9a-f]{24}", "/{job}", re.sub(r"/m[0-9a-f]{24}", "/{model}", path))


def field_names(body: Any) -> list[str]:
    """As the ART script records them (tests/interop/art/serverless_client.py)."""
    if not isinstance(body, dict):
        return []
    names = set(body)
    for key in ("experimental_config", "config"):
        if isinstance(body.get(key), dict):
            names |= {f"{key}.{inner}" for inner in body[key]}
    for group in body.get("trajectory_groups") or []:
        names |= {f"trajectory_groups[].{inner}" for inner in group}
    return sorted(names)


def request_set(requests: list[list[Any]]) -> set[tuple[str, str, tuple[str, ...]]]:
    return {
        (method, template(path), tuple(fields))
        for method, path, fields in requests
        if LEASE_PATH.fullmatch(path) is None
    }


class Recording(httpx.AsyncBaseTransport):
    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.requests: list[list[Any]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        self.requests.append([request.method, request.url.path, field_names(body)])
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def arthex_script(
    url: str, key: str, tiny: str, base_path: Path
) -> tuple[list[list[Any]], dict[str, Any]]:
    """The ART script's training calls, under arthex.art with arthex's own client: the
    requests it made, and what `backend.train` returned."""
    recording = Recording()
    backend = ServerlessBackend(api_key=key, base_url=url + "/v1", transport=recording)
    model = art.TrainableModel(
        name="agent", run_name="agent-run", project="proj", base_model=tiny,
        base_path=str(base_path), report_metrics=[],
    )  # fmt: skip

    async def rollout(prompt: str) -> art.Trajectory:
        completion = await model.openai_client().chat.completions.create(
            model=model.get_inference_name(),
            messages=[{"role": "user", "content": prompt}],
            max_tokens=4,
            logprobs=True,
        )
        choice = completion.choices[0]
        return art.Trajectory(
            messages_and_choices=[{"role": "user", "content": prompt}, choice],
            reward=float(len(choice.message.content or "") % 3),
        )

    try:
        await model.register(backend)
        await model.get_step()
        groups = [art.TrajectoryGroup([await rollout(p) for _ in range(3)]) for p in PROMPTS]
        await model.log(groups, split="train")
        result = await backend.train(model, groups, learning_rate=1e-3)
        await model.log(metrics=result.metrics, step=result.step, split="train")
        await model.get_step()
        await model.log(metrics={"reward": 0.5}, step=result.step, split="val")
        await model.delete_checkpoints()
        await model.get_step()
    finally:
        await model.close()
        await backend.close()
    assert isinstance(result, art.ServerlessTrainResult)  # ART's class, as ART's client gives
    return recording.requests, {"step": result.step, "artifact_name": result.artifact_name}


def test_arts_serverless_backend_trains_on_arthex_serve_and_arthexs_client_sends_the_same(
    server: ServerProcess, tiny: str, tmp_path: Path
) -> None:
    tenant, key = server.fresh_tenant()
    seen = run_arts_client(server, key, tiny, tmp_path / "art")

    named = f"wandb-artifact:///{tenant}/proj/agent-run"
    identity = seen["identity"]
    assert identity["entity"] == tenant and identity["run_id"] == identity["id"]
    assert identity["inference_base_url"] == server.url + "/v1/"
    assert identity["inference_name"] == named
    assert identity["inference_name_step0"] == f"{named}:step0"
    assert seen["step_before"] == 0
    assert seen["train"]["step"] == 1 == seen["step_after"]
    assert seen["train"]["artifact_name"] == f"{tenant}/proj/agent-run:step1"
    assert "loss/train" in seen["train"]["metric_keys"]
    assert seen["pinned_name"] == f"{named}:step1"  # adapter_lease pins the step
    asked = [name for name, _ in seen["seen"]]
    assert asked == [named] * 6 + [f"{named}:step1", named, f"{named}:step0"]
    assert all(name == answered for name, answered in seen["seen"])
    assert seen["checkpoints_before_delete"] == [0, 1]
    assert seen["checkpoints_after_delete"] == [1] and seen["step_final"] == 1

    # ART's client logged one group of three, then deleted the model: the server's files
    # and registry no longer hold it, and the tenant's next request for it is a 404
    assert [r[:2] for r in seen["own_requests"]] == [
        ["POST", f"/v1/preview/models/{identity['id']}/log"],
        ["DELETE", f"/v1/preview/models/{identity['id']}"],
        ["GET", f"/v1/preview/models/{identity['id']}/checkpoints"],
    ]
    fields = set(seen["own_requests"][0][2])
    assert {"model_id", "split", "trajectory_groups", "trajectory_groups[].trajectories"} <= fields
    assert seen["after_delete"] == 404
    registry = json.loads((server.state_dir / "registry.json").read_text())
    assert not [m for m in registry["models"] if m["tenant"] == tenant]
    assert not (server.state_dir / "backend" / tenant / "models" / identity["id"]).exists()
    # ART's frontend wrote its history where ART writes it: by run_name
    history = tmp_path / "art" / "proj" / "models" / "agent-run" / "history.jsonl"
    assert any("loss/train" in json.loads(line) for line in history.read_text().splitlines())

    other_tenant, other_key = server.fresh_tenant()
    ours, trained = asyncio.run(arthex_script(server.url, other_key, tiny, tmp_path / "arthex"))
    # the result ART's client gave above, for this tenant's model
    assert trained == {"step": 1, "artifact_name": f"{other_tenant}/proj/agent-run:step1"}
    (mine,) = [
        m["id"]
        for m in json.loads((server.state_dir / "registry.json").read_text())["models"]
        if m["tenant"] == other_tenant
    ]
    assert checkpoint_folders(server, other_tenant, mine) == ["0001"]  # the same end
    arts, arthexs = request_set(seen["requests"]), request_set(ours)
    assert arthexs == arts, (
        f"only ART's: {sorted(arts - arthexs)}\nonly arthex's: {sorted(arthexs - arts)}"
    )
    assert ("POST", "/v1/preview/training-jobs") in {(m, p) for m, p, _ in arts}
