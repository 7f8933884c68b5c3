"""`arthex.art.cli.run()`, ART's `art run`, as a real process: it serves ART's remote-backend
API (`arthex serve --protocol art`, the LocalBackend) on loopback until SIGTERM, answering
`/healthcheck` and `/_get_step` as ART's server does, with nothing trained or written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests._art_server import REPO, ArtServer, _await_ready

pytestmark = pytest.mark.e2e


def test_run_serves_arts_api_until_sigterm(tmp_path: Path) -> None:
    base = tmp_path / "art"
    code = f"from arthex.art.cli import run; run(port=0, inference_port=0, base_path={str(base)!r})"
    paths = [str(REPO), os.environ.get("PYTHONPATH", "")]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in paths if p),
        "HF_HUB_OFFLINE": "1",
    }
    log = tmp_path / "server.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-c", code], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=sink
        )
    server = ArtServer(*_await_ready(process, log, 180.0), base, process, log)
    try:
        assert server.api_url.startswith("http://127.0.0.1:")
        with httpx.Client(base_url=server.api_url, timeout=30) as client:
            assert client.get("/healthcheck").json() == {"status": "ok"}
            prompted = {"name": "gpt", "project": "one", "trainable": False}
            assert client.post("/_get_step", json=prompted).json() == 0
    finally:
        server.stop()
    assert process.returncode == 0, server.log_text()[-2000:]
    assert not base.exists() or not any(base.rglob("*.safetensors"))
