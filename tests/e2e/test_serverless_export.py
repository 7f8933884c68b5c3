"""A model trained through `arthex serve` is exported without the server's opaque folder: the
client's model.json records the server and its model id; `model.export()` of a Serverless
model and `arthex export` of the client's run fetch the step's checkpoint from the server and
write the same files as `arthex export project/name` run on the server's state directory,
where `arthex runs` shows each model's project/name."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import arthex
from arthex.adapters.serverless import ServerlessBackend
from arthex.core.config import TrainConfig
from arthex.testing.builders import synthetic_groups
from tests._serverless import ServerProcess, local_tiny_server
from tests.e2e.test_cli import arthex_cli, table_rows

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from local_tiny_server(tmp_path_factory, "export")


def files_of(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def test_a_served_run_exports_from_the_client_as_on_the_server(
    server: ServerProcess, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    from arthex.testing.tiny_model import tiny_model

    tiny = tiny_model(tmp_path_factory.getbasetemp() / "tiny-model")
    _, key = server.fresh_tenant()
    base_path = tmp_path / "art"

    async def main() -> str:
        backend = ServerlessBackend(server.url, key)
        model = arthex.TrainableModel(
            name="agent", project="exported", base_model=tiny, base_path=str(base_path),
            report_metrics=[],
        )  # fmt: skip
        try:
            await model.register(backend)
            await model.train(synthetic_groups(), config=TrainConfig(learning_rate=1e-2))
            return await model.export(str(tmp_path / "from-model"))
        finally:
            await model.close()
            await backend.close()

    written = asyncio.run(main())
    listing = httpx.get(
        server.url + "/preview/models", headers={"Authorization": f"Bearer {key}"}
    ).json()
    (record,) = [m for m in listing["data"] if (m["project"], m["name"]) == ("exported", "agent")]
    run_dir = base_path / "exported" / "models" / "agent"
    spec = json.loads((run_dir / "model.json").read_text())
    assert spec["remote"] == {"server": server.url + "/v1", "model_id": record["id"]}
    assert Path(written) == tmp_path / "from-model"

    # the client's run, with the key it trained with
    client_out = tmp_path / "from-client-run"
    done = subprocess.run(
        [sys.executable, "-m", "arthex.apps.cli", "export", str(run_dir), "--out", str(client_out)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "ARTHEX_API_KEY": key, "ARTHEX_SERVERLESS_URL": server.url},
    )
    assert done.returncode == 0, done.stderr
    # the server's state directory, by the names the client gave
    server_out = tmp_path / "on-server"
    on_server = arthex_cli(
        "export", "exported/agent", "--base-path", str(server.state_dir), "--out", str(server_out)
    )
    assert on_server.returncode == 0, on_server.stderr
    expected = files_of(server_out)
    assert "model.safetensors" in expected and "config.json" in expected
    assert files_of(tmp_path / "from-model") == expected
    assert files_of(client_out) == expected

    listed = arthex_cli("runs", "--base-path", str(server.state_dir))
    assert listed.returncode == 0, listed.stderr
    assert "exported/agent" in [row[0] for row in table_rows(listed.stdout)]
    # the one line pointing at the viewer names the folder whose runs it finds
    (hint,) = [line for line in listed.stderr.splitlines() if "arthex view" in line]
    assert list(Path(hint.split("arthex view ", 1)[1]).glob("*/models/*"))


def _refused_export(tmp_path: Path, server_url: str, **env: str | None) -> list[str]:
    """`arthex export` of a client's run recording `server_url`, with `env` changed (None
    removes a variable): it must fail; its stderr lines."""
    run_dir = tmp_path / "art" / "p" / "models" / "m"
    run_dir.mkdir(parents=True)
    remote = {"server": server_url, "model_id": "m" + "0" * 24}
    (run_dir / "model.json").write_text(json.dumps({"project": "p", "name": "m", "remote": remote}))
    environment = {k: v for k, v in os.environ.items() if k not in env}
    environment.update({k: v for k, v in env.items() if v is not None})
    done = subprocess.run(
        [sys.executable, "-m", "arthex.apps.cli", "export", str(run_dir), "--out", "o"],
        capture_output=True,
        text=True,
        timeout=120,
        env=environment,
        cwd=tmp_path,
    )
    assert done.returncode != 0
    return done.stderr.strip().splitlines()


def test_exporting_a_client_run_without_the_key_names_the_variable(
    server: ServerProcess, tmp_path: Path
) -> None:
    lines = _refused_export(
        tmp_path, server.url, ARTHEX_API_KEY=None, ARTHEX_SERVERLESS_URL=server.url
    )
    assert len(lines) == 1 and "ARTHEX_API_KEY" in lines[0] and server.url in lines[0], lines


def test_the_key_goes_only_to_the_server_the_user_configured(tmp_path: Path) -> None:
    """A run folder naming another server (a shared or cloned folder) never gets the key sent
    there: refused in one line, before any connection."""
    lines = _refused_export(
        tmp_path, "http://127.0.0.9:9", ARTHEX_API_KEY="secret", ARTHEX_SERVERLESS_URL=None
    )
    assert len(lines) == 1 and "ARTHEX_SERVERLESS_URL" in lines[0], lines
    assert "127.0.0.9:9" in lines[0]
