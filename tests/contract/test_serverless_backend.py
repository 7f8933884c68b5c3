"""ServerlessBackend passes the TrainingBackend contract against a real training server process
on loopback: with the in-memory backend behind it, with one lacking a loss, and with
LocalBackend training the tiny model on CPU.

Each test gets a tenant of its own on a server shared by the class, so tests see a clean
server without paying for a process start each. `restart_backend` is a new client with the
same key: what a frontend process that restarts sees (the server keeps the checkpoints; the
server's own restart is tested in tests/e2e/test_serverless_flow.py).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from arthex.adapters.serverless import ServerlessBackend
from arthex.core.errors import InvalidInputError
from arthex.ports.training_backend import TrainingBackend
from arthex.testing.contracts.training_backend import TrainingBackendContract
from tests._serverless import ServerProcess, local_tiny_server, start_server

pytestmark = pytest.mark.e2e


def _server(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[ServerProcess]:
    server = start_server(tmp_path_factory.mktemp("server") / "state", backend=backend)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="class")
def inmemory_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from _server(tmp_path_factory, "inmemory")


@pytest.fixture(scope="class")
def cispo_only_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from _server(tmp_path_factory, "tests._serverless:cispo_only_backend")


@pytest.fixture(scope="class")
def local_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from local_tiny_server(tmp_path_factory, "server")


class ServerlessContract(TrainingBackendContract):
    """The kit's hooks, for a class whose `server` fixture names its server."""

    @pytest.fixture
    def key(self, server: ServerProcess) -> str:
        return server.fresh_key()

    @pytest.fixture
    def backend(self, server: ServerProcess, key: str) -> TrainingBackend:
        return ServerlessBackend(server.url, key)

    @pytest.fixture
    def restart_backend(self, server: ServerProcess, key: str) -> TrainingBackend:
        return ServerlessBackend(server.url, key)


class TestServerlessOverInMemory(ServerlessContract):
    @pytest.fixture
    def server(self, inmemory_server: ServerProcess) -> ServerProcess:
        return inmemory_server

    def test_environment_supplies_url_and_key(
        self, inmemory_server: ServerProcess, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        key = inmemory_server.fresh_key()
        monkeypatch.setenv("ARTHEX_SERVERLESS_URL", inmemory_server.url + "/v1/")
        monkeypatch.setenv("ARTHEX_API_KEY", key)
        backend = ServerlessBackend()
        assert backend.base_url == inmemory_server.url + "/v1"
        assert backend.api_key == key
        assert "train" in backend.capabilities
        # a server's root without /v1 (arthex's older form) is the same API
        assert ServerlessBackend(inmemory_server.url, key).base_url == backend.base_url

    def test_without_a_url_it_is_the_hosted_service_and_a_key_is_required(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        for name in ("ARTHEX_SERVERLESS_URL", "ARTHEX_API_KEY", "WANDB_API_KEY"):
            monkeypatch.delenv(name, raising=False)
        hosted = ServerlessBackend(api_key="k" * 20)
        assert hosted.base_url == "https://api.training.wandb.ai/v1"  # ART's client's default
        with pytest.raises(InvalidInputError, match="ARTHEX_API_KEY"):
            ServerlessBackend("http://127.0.0.1:1")
        monkeypatch.setenv("WANDB_API_KEY", "w" * 20)  # the hosted service's key, as ART reads it
        assert ServerlessBackend().api_key == "w" * 20


class TestServerlessOverInMemoryWithoutPpo(ServerlessContract):
    """The server's backend lacks losses and SFT: the refusal crosses the wire as
    UnsupportedCapability."""

    @pytest.fixture
    def server(self, cispo_only_server: ServerProcess) -> ServerProcess:
        return cispo_only_server

    def test_the_server_refuses_an_sft_job_its_backend_cannot_run(
        self, cispo_only_server: ServerProcess
    ) -> None:
        import httpx

        key = cispo_only_server.fresh_key()
        headers = {"Authorization": f"Bearer {key}"}
        with httpx.Client(base_url=cispo_only_server.url, headers=headers) as client:
            model = client.post(
                "/preview/models", json={"project": "p", "name": "m", "base_model": None}
            ).json()
            record = {
                "messages": [
                    {"role": "user", "content": "a"},
                    {"role": "assistant", "content": "b"},
                ]
            }
            response = client.post(
                "/preview/sft-training-jobs",
                json={"model_id": model["id"], "conversations": [record], "config": {}},
            )
        assert response.status_code == 501
        assert response.json()["error"]["param"] == "sft"


class TestServerlessOverLocal(ServerlessContract):
    """LocalBackend and the tiny model on CPU behind the server: the serving and
    learning-signal tests of the kit run through the server's OpenAI-compatible proxy."""

    @pytest.fixture
    def server(self, local_server: ServerProcess) -> ServerProcess:
        return local_server

    @pytest.fixture
    def base_model(self, tmp_path_factory: pytest.TempPathFactory) -> str | None:
        from arthex.testing.tiny_model import tiny_model

        return tiny_model(tmp_path_factory.getbasetemp() / "tiny-model")
