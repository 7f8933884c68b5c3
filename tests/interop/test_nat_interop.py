"""NVIDIA NeMo Agent Toolkit's ART trainer adapter (`nvidia-nat-openpipe-art` 1.9.0, with the
`openpipe-art` 0.5.17 it is pinned to, in their own venv: nat_env.py), unmodified, trains
through `arthex serve --protocol art` on loopback with the tiny model on
LocalBackend(engine="torch"); ART's own TrainableModel does too through NAT's RemoteBackend;
and a server killed mid-update fails the adapter's job at once, and a restarted one continues
from the last completed step.

NAT's health check and rollouts use port 8000 whatever the config says, so each server
listens on a loopback address of its own (127.x.y.z) with its inference server on 8000 there:
tests running side by side never meet on a port.
"""

from __future__ import annotations

import contextlib
import json
import math
import random
import re
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from arthex.testing.tiny_model import tiny_model
from tests._art_server import (
    PAUSE_DIR_ENV,
    RECORDED,
    RECORDED_BASE_MODEL,
    ArtServer,
    start_art_server,
)

from .art_env import art_environment
from .nat_env import SCRIPTS, nat_python, run_nat

DRIVER_TIMEOUT_S = 600.0
DOCS = Path(__file__).resolve().parents[2] / "docs" / "backends" / "nat.md"


def docs_config() -> dict[str, Any]:
    """The NAT config YAML of docs/backends/nat.md (the block after `<!-- nat-config -->`)."""
    import yaml

    found = re.search(r"<!-- nat-config -->\n```yaml\n(.*?)```", DOCS.read_text(), re.DOTALL)
    assert found is not None, "docs/backends/nat.md lost its NAT config block"
    config: dict[str, Any] = yaml.safe_load(found.group(1))
    return config


def free_loopback_address() -> str:
    """A 127.x.y.z address whose port 8000 is free (NAT's inference port)."""
    rng = random.Random()
    for _ in range(50):
        address = f"127.{rng.randint(1, 254)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"
        with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((address, 8000))
            except OSError:
                continue
            return address
    raise RuntimeError("no loopback address with port 8000 free")


def port_of(server: ArtServer) -> int:
    return int(server.api_url.rsplit(":", 1)[1])


def checkpoints(server: ArtServer, project: str, name: str) -> list[int]:
    folder = server.base_path / project / "models" / name / "checkpoints"
    return sorted(int(p.name) for p in folder.iterdir() if p.is_dir() and p.name.isdigit())


@pytest.fixture(scope="module")
def nat() -> Path:
    return nat_python()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    return tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, tiny: str) -> Iterator[tuple[ArtServer, str]]:
    address = free_loopback_address()
    process = start_art_server(
        tmp_path_factory.mktemp("nat-server") / "runs", host=address, inference_port=8000
    )
    try:
        yield process, address
    finally:
        process.stop()


def test_nat_adapter_trains_two_epochs(
    nat: Path, tiny: str, server: tuple[ArtServer, str], tmp_path: Path
) -> None:
    """With the NAT config of docs/backends/nat.md (its address and base model replaced)."""
    process, address = server
    config = docs_config()
    adapter = config["trainer_adapters"][config["finetuning"]["trainer_adapter"]]
    name, project = adapter["backend"]["name"], adapter["backend"]["project"]
    learning_rate = adapter["training"]["learning_rate"]
    assert adapter["backend"]["delete_old_checkpoints"] is True
    payload = {"config": config, "ip": address, "port": port_of(process), "base_model": tiny}
    result = run_nat(nat, "drive_adapter.py", payload, tmp_path, DRIVER_TIMEOUT_S)
    # initialize: register + prepare (ART's naming, the inference server on 8000) + health
    assert result["registered"] == {
        "inference_base_url": f"http://{address}:8000/v1",
        "inference_api_key": "default",
        "inference_model_name": f"{name}@0",
    }
    assert result["healthy"] is True
    assert [s["status"] for s in result["submissions"]] == ["completed", "completed"]
    assert result["steps"] == [0, 1, 2]
    # ART's delete_checkpoints keeps the latest step and the best `val/reward` (none was
    # logged): before the second update it kept step 1 only, so step 0 is gone
    assert checkpoints(process, project, name) == [1, 2]
    assert f"{name}@2" in result["served"] and f"{name}@0" not in result["served"]
    assert name in result["served"], "the bare name: the newest step, for NAT's rollouts"
    assert (result["chat_status"], result["chat_model"]) == (200, f"{name}@2")
    # the NAT side's ART Model wrote its own run, in ART's layout
    layout = result["layout"]
    assert {"history.jsonl", "trajectories/train/0001.parquet"} <= set(layout["files"])
    assert "trajectories/train/0002.parquet" in layout["files"]
    assert layout["history_steps"] == [1, 2]
    assert layout["trajectories"] == {"0001.parquet": [2, 2], "0002.parquet": [2, 2]}
    # the learning rate NAT's config set, not the 5e-05 its adapter always sends
    assert all(math.isclose(lr, learning_rate) for lr in layout["history_learning_rates"])
    # the client's files are the client's: the server wrote none of them
    server_run = process.base_path / project / "models" / name
    assert not (server_run / "history.jsonl").exists()
    assert (tmp_path / ".art" / project / "models" / name / "history.jsonl").is_file()


def test_plain_art_trainable_model_over_nats_remote_backend(
    nat: Path, tiny: str, server: tuple[ArtServer, str], tmp_path: Path
) -> None:
    process, address = server
    payload = {
        "ip": address, "port": port_of(process), "base_model": tiny, "name": "plain",
        "project": "art-run",
    }  # fmt: skip
    result = run_nat(nat, "drive_plain_art.py", payload, tmp_path, DRIVER_TIMEOUT_S)
    assert result["steps"] == [0, 1, 2]
    assert result["inference_base_url"] == f"http://{address}:8000/v1"
    # delete_checkpoints after each update kept only the latest
    assert checkpoints(process, "art-run", "plain") == [2]
    assert result["layout"]["history_steps"] == [1, 2]
    assert result["layout"]["trajectories"] == {"0001.parquet": [2, 2], "0002.parquet": [2, 2]}
    # ART's config learning rate reached the trainer (no trainer_args here)
    assert all(math.isclose(lr, 2e-5) for lr in result["layout"]["history_learning_rates"])


def test_a_server_killed_mid_update_fails_the_job_and_a_restart_continues(
    nat: Path, tiny: str, tmp_path: Path
) -> None:
    address = free_loopback_address()
    pause_dir = tmp_path / "pause"
    pause_dir.mkdir()
    base_path = tmp_path / "runs"
    env = {PAUSE_DIR_ENV: str(pause_dir)}
    backend = "tests._art_server:pausable_backend"
    first = start_art_server(base_path, host=address, inference_port=8000, backend=backend, env=env)
    port = port_of(first)
    payload = {
        "ip": address, "port": port, "base_model": tiny, "name": "agent", "project": "fault",
        "pause_dir": str(pause_dir), "out": str(tmp_path / "fault-answer.json"),
    }  # fmt: skip
    driver_log = tmp_path / "driver.log"
    with driver_log.open("w") as log:
        driver = subprocess.Popen(
            [str(nat), str(SCRIPTS / "drive_fault.py")],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=log,
            cwd=tmp_path, env=art_environment(), text=True,
        )  # fmt: skip
    second: ArtServer | None = None
    try:
        assert driver.stdin is not None
        driver.stdin.write(json.dumps(payload))
        driver.stdin.close()
        wait_for(pause_dir / "submitted", driver, driver_log, DRIVER_TIMEOUT_S)
        assert checkpoints(first, "fault", "agent") == [0, 1]
        first.stop(kill=True)
        (pause_dir / "pause").unlink()
        (pause_dir / "killed").write_text(repr(time.time()))
        second = start_art_server(
            base_path, host=address, port=port, inference_port=8000, backend=backend, env=env
        )
        (pause_dir / "restarted").touch()
        driver.wait(timeout=DRIVER_TIMEOUT_S)
        assert driver.returncode == 0, driver_log.read_text()[-8000:]
        result: dict[str, Any] = json.loads((tmp_path / "fault-answer.json").read_text())
        assert result["first"] == "completed"
        assert result["step_before_kill"] == 1
        killed = result["killed"]
        seconds = killed["seconds_after_kill"]
        print(f"adapter status {killed['status']} {seconds:.2f} s after the kill")
        assert killed["status"] == "failed", killed
        assert killed["seconds_after_kill"] < 30, killed
        assert "Error" in killed["message"], killed  # the cause, as the adapter words it
        assert result["step_after_restart"] == 1
        assert result["third"] == "completed"
        assert result["step_after_third"] == 2
        assert checkpoints(second, "fault", "agent") == [0, 1, 2]
        run_dir = base_path / "fault" / "models" / "agent" / "checkpoints"
        assert sorted(p.name for p in run_dir.iterdir()) == ["0000", "0001", "0002"]
        # the client logged the two completed updates, at their steps
        assert result["layout"]["history_steps"] == [1, 2]
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        first.stop(kill=True)
        if second is not None:
            second.stop()


def wait_for(path: Path, driver: subprocess.Popen[str], log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if driver.poll() is not None:
            pytest.fail(f"NAT's driver ended early:\n{log.read_text()[-8000:]}")
        assert time.monotonic() < deadline, f"waited {timeout_s} s for {path.name}"
        time.sleep(0.05)


def test_the_recorded_wire_is_what_nat_sends(nat: Path, tmp_path: Path) -> None:
    """The fast suite's wire data (tests/unit/data/art_protocol/) is what NAT 1.9.0's adapter
    and ART 0.5.17 send today: recorded again here, it is the same, request for request."""
    address = free_loopback_address()
    payload = {"host": address, "base_model": RECORDED_BASE_MODEL}
    result = run_nat(nat, "record_wire.py", payload, tmp_path, DRIVER_TIMEOUT_S)
    assert result["statuses"] == ["completed", "completed"]
    stored = json.loads(RECORDED.read_text())
    fresh = json.loads(json.dumps(result["requests"]).replace(address, stored["host"]))
    assert fresh == stored["requests"]
