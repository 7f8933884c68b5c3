"""A hub id on a machine that cannot reach the hub: one line at once (no retries, no doubled
period), no connection at all with HF_HUB_OFFLINE, and a model the cache holds loads from it.
Each case is a child process with its own empty Hugging Face cache (HF_HOME) and a hub
endpoint on loopback that is closed, or that records every connection made to it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("huggingface_hub")

from arthex.testing.tiny_model import tiny_model

pytestmark = pytest.mark.e2e

FAKE_ID = "arthex-tests/no-such-model"

SCRIPT = textwrap.dedent(
    """
    import asyncio, json, sys
    from arthex.adapters.local import LocalBackend
    from arthex.composition.api import TrainableModel
    from arthex.core.errors import InvalidInputError

    async def main() -> dict:
        model = TrainableModel(name="hub", project="p", base_model=sys.argv[1],
                               base_path=sys.argv[2], report_metrics=[])
        backend = LocalBackend(engine="torch", seed=0)
        try:
            await model.register(backend)
            return {"step": await model.get_step()}
        except InvalidInputError as error:
            return {"error": str(error)}
        finally:
            await backend.close()
            await model.close()

    print(json.dumps(asyncio.run(main())))
    """
)


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def register(tmp_path: Path, base_model: str, **env: str) -> tuple[dict[str, object], str]:
    environment = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("HF_") and not k.lower().endswith("_proxy")
    }
    environment.update({"HF_HOME": str(tmp_path / "hf"), **env})
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, base_model, str(tmp_path / "runs")],
        capture_output=True,
        text=True,
        timeout=300,
        env=environment,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def test_an_uncached_hub_id_with_the_hub_unreachable_fails_in_one_line_without_retries(
    tmp_path: Path,
) -> None:
    endpoint = f"http://127.0.0.1:{closed_port()}"
    outcome, stderr = register(tmp_path, FAKE_ID, HF_ENDPOINT=endpoint)
    message = str(outcome["error"])
    assert "\n" not in message and ".." not in message
    assert FAKE_ID in message and "cannot be reached" in message and "cache" in message
    assert "Retry" not in stderr and "Traceback" not in stderr, stderr[-2000:]
    assert not (tmp_path / "runs" / "p" / "models" / "hub" / "model.json").exists()


def test_with_hf_hub_offline_no_connection_is_made(tmp_path: Path) -> None:
    with socket.socket() as hub:
        hub.bind(("127.0.0.1", 0))
        hub.listen()
        hub.setblocking(False)
        endpoint = f"http://127.0.0.1:{hub.getsockname()[1]}"
        outcome, stderr = register(tmp_path, FAKE_ID, HF_ENDPOINT=endpoint, HF_HUB_OFFLINE="1")
        with pytest.raises(BlockingIOError):
            hub.accept()  # nobody knocked
    message = str(outcome["error"])
    assert "HF_HUB_OFFLINE is set" in message and ".." not in message and "\n" not in message
    assert "Retry" not in stderr


def test_a_cached_hub_model_loads_from_the_cache_with_the_hub_unreachable(tmp_path: Path) -> None:
    # the cache's own layout: models--{org}--{name}/refs/main names the snapshot folder
    repo = tmp_path / "hf" / "hub" / ("models--" + FAKE_ID.replace("/", "--"))
    commit = "0" * 40
    tiny_model(repo / "snapshots" / commit)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    endpoint = f"http://127.0.0.1:{closed_port()}"
    outcome, stderr = register(tmp_path, FAKE_ID, HF_ENDPOINT=endpoint)
    assert outcome == {"step": 0}, stderr[-2000:]
    assert "Retry" not in stderr, stderr[-2000:]


def test_behind_a_proxy_the_hub_is_left_to_transformers(monkeypatch: pytest.MonkeyPatch) -> None:
    """A direct connection fails behind a proxy although the hub is reachable through it: the
    probe does not call such a hub unreachable."""
    from arthex.adapters import hub

    endpoint = f"http://127.0.0.1:{closed_port()}"
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    assert hub._probe(endpoint) is not None  # no proxy: the closed port is unreachable
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    assert hub._probe(endpoint) is None
