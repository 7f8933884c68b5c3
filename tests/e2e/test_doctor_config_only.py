"""`arthex doctor` plans memory for a base model that is not downloaded, from its config alone:
the docs' own example offline (the shape shipped for it), a hub on loopback serving only a
config.json, and a config.json path. Nothing lands in the Hugging Face cache.

The oracles: the parameter counts the models' cards publish, and Qwen2.5-7B's config.json
as the hub serves it (written out below)."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_cli import env

pytestmark = pytest.mark.e2e

REPO = "Qwen/Qwen2.5-7B-Instruct"
QWEN_7B_CONFIG = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "vocab_size": 152064,
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "num_hidden_layers": 28,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "max_position_embeddings": 32768,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
# Qwen2.5-7B's card: 7.61B parameters
PUBLISHED = "7615.6M params"


def doctor(hf_home: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in env().items() if k not in ("HF_ENDPOINT", "HF_HUB_OFFLINE")}
    environ |= {"HF_HOME": str(hf_home), **extra}
    command = ["doctor", "--device", "cuda", "--device-memory", "80GiB", "--engine", "torch",
               "--max-seq-len", "256", "--mode", "lora", *args]  # fmt: skip
    return subprocess.run(
        [sys.executable, "-m", "arthex.apps.cli", *command],
        capture_output=True,
        text=True,
        env=environ,
        timeout=120,
        check=False,
    )


def line(result: subprocess.CompletedProcess[str], name: str) -> str:
    found = [row for row in result.stdout.splitlines() if f" {name}: " in f" {row[6:]}"]
    assert len(found) == 1, result.stdout + result.stderr
    return found[0]


def files_under(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


def test_the_docs_example_plans_offline_from_the_shipped_shape(tmp_path: Path) -> None:
    result = doctor(tmp_path / "hf", "--base-model", REPO, HF_HUB_OFFLINE="1")
    assert result.returncode == 1, result.stdout + result.stderr  # a warning, no failure
    model = line(result, "base model")
    assert model.startswith("warn") and "not downloaded" in model, model
    assert "shape arthex ships" in model and "HF_HUB_OFFLINE is set" in model, model
    memory = line(result, "memory")
    assert memory.startswith("ok") and PUBLISHED in memory, memory
    assert "template:" not in result.stdout  # no template check without the tokenizer
    assert files_under(tmp_path / "hf") == []


@pytest.fixture
def hub() -> Iterator[tuple[str, list[str]]]:
    """A loopback server answering the hub's resolve URL of REPO's config.json only."""
    asked: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            if self.path != f"/{REPO}/resolve/main/config.json":
                self.send_error(404)
                return
            body = json.dumps(QWEN_7B_CONFIG).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", asked
    finally:
        server.shutdown()
        server.server_close()


def test_a_reachable_hub_gives_its_config_json_and_nothing_is_cached(
    tmp_path: Path, hub: tuple[str, list[str]]
) -> None:
    endpoint, asked = hub
    result = doctor(tmp_path / "hf", "--base-model", REPO, HF_ENDPOINT=endpoint)
    model = line(result, "base model")
    assert "planned from the hub's config.json" in model, model
    assert asked == [f"/{REPO}/resolve/main/config.json"]
    memory = line(result, "memory")
    assert memory.startswith("ok") and PUBLISHED in memory, memory
    assert files_under(tmp_path / "hf") == []

    # a model neither the hub nor the shipped table knows: one failing line naming both
    unknown = doctor(tmp_path / "hf", "--base-model", "someone/unknown-7b", HF_ENDPOINT=endpoint)
    assert unknown.returncode == 2
    failed = line(unknown, "base model")
    assert failed.startswith("fail") and "not a model arthex knows" in failed, failed
    assert "HTTP 404" in failed, failed


def test_a_config_json_path_is_planned_without_a_model_folder(tmp_path: Path) -> None:
    config = tmp_path / "qwen" / "config.json"
    config.parent.mkdir()
    config.write_text(json.dumps(QWEN_7B_CONFIG))
    result = doctor(tmp_path / "hf", "--base-model", str(config), HF_HUB_OFFLINE="1")
    assert line(result, "base model").startswith(f"ok    base model: planned from {config}")
    assert PUBLISHED in line(result, "memory")
    assert os.listdir(config.parent) == ["config.json"]
