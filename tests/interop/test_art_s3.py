"""ART 0.5.23's S3 helpers and arthex's under `arthex.art` give the same outcomes on the same
cases (art/s3_script.py, one script for both), against one moto S3 server on loopback that
both reach through the AWS environment: ART's by the `aws` command, arthex's by pyarrow.

- the keys of `build_s3_path` and `build_s3_zipped_step_path`;
- a model pushed by arthex: the steps ART's and arthex's listings find, and the files each
  one's `pull_model_from_s3` brings (all of it, one step, all but the trajectories);
- a folder pushed by ART and by arthex: the same keys holding the same bytes.

One difference is on purpose (docs/migrating-from-art.md): a step folder that holds half a
checkpoint (an upload in flight) is a step for ART, not for arthex.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from arthex.art.utils.s3 import pull_model_from_s3, push_model_to_s3
from tests._s3_server import BUCKET, S3

from .art_env import both_outcomes

PATHS: list[dict[str, Any]] = [
    {"model_name": "agent", "project": "proj", "s3_bucket": "bkt"},
    {"model_name": "agent", "project": "proj", "s3_bucket": "bkt", "step": 7},
    {"model_name": "m-1", "project": "p.x", "s3_bucket": "my-bucket", "prefix": "/team/runs/"},
    {"model_name": "m", "project": "p", "s3_bucket": "b.c-d", "prefix": "", "step": 12345},
    {"model_name": "m", "project": "p", "s3_bucket": "bkt", "prefix": "one", "step": 0},
]
ZIPPED: list[dict[str, Any]] = [
    {"model_name": "agent", "project": "proj", "step": 3, "s3_bucket": "bkt"},
    {"model_name": "m", "project": "p", "step": 10000, "s3_bucket": "bkt", "prefix": "a/b"},
]


@pytest.fixture(scope="module")
def server() -> Iterator[S3]:
    made = S3()
    yield made
    made.stop()


def test_the_keys_are_arts() -> None:
    art, ours = both_outcomes("s3_script", {"paths": PATHS, "zipped": ZIPPED})
    assert ours == art
    assert art["paths"][2] == "s3://my-bucket/team/runs/p.x/models/m-1"
    assert art["zipped"][0] == "s3://bkt/proj/models/agent/zipped-steps/0003.zip"


def write_run(art_path: Path) -> Path:
    """A run folder with whole checkpoints of both kinds, trajectories and a history."""
    run = art_path / "proj" / "models" / "agent"
    files = {
        "history.jsonl": b'{"step": 1}\n',
        "model.json": b'{"base_model": "tiny"}',
        "trajectories/train/0001.parquet": b"PAR1 not really",
        "checkpoints/0001/model.safetensors": bytes(range(256)) * 9,
        "checkpoints/0001/trainer_state.json": b'{"format": 1, "step": 1}',
        "checkpoints/0002/adapter_model.safetensors": b"\x00\x01" * 999,
        "checkpoints/0002/adapter_config.json": b'{"r": 8}',
        "checkpoints/0004/model.safetensors": b"four" * 77,
        "checkpoints/0004/trainer_state.json": b'{"format": 1, "step": 4}',
    }
    for relative, data in files.items():
        (run / relative).parent.mkdir(parents=True, exist_ok=True)
        (run / relative).write_bytes(data)
    return run


def files(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }


def test_art_and_arthex_read_and_write_the_same_model_on_s3(
    server: S3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if shutil.which("aws") is None:
        pytest.skip("ART's S3 helpers run the `aws` command (awscli), not found on PATH")
    server.use_from_environment(monkeypatch)
    source = str(tmp_path / "source")
    write_run(tmp_path / "source")
    asyncio.run(push_model_to_s3("agent", "proj", BUCKET, "by-arthex", art_path=source))
    # half a checkpoint: an upload still in flight
    half = f"{BUCKET}/half/proj/models/agent/checkpoints/0009/model.safetensors"
    server.filesystem.open_output_stream(half).close()
    asyncio.run(push_model_to_s3("agent", "proj", BUCKET, "half", art_path=source))
    at = {"bucket": BUCKET, "project": "proj", "model": "agent"}
    pull = {**at, "prefix": "by-arthex", "root": str(tmp_path / "pulled")}
    cases = {
        "paths": [],
        "zipped": [],
        "listings": [
            {**at, "prefix": "by-arthex", "not_after": [0, 1, 3, 4, 100]},
            {**at, "prefix": "nothing-here", "not_after": [5]},
            {**at, "prefix": "half", "not_after": [8, 9]},
        ],
        "pulls": [
            {**pull, "step": None, "exclude": None},
            {**pull, "step": 2, "exclude": None},
            {**pull, "step": None, "exclude": ["trajectories"]},
        ],
        "pushes": [{**at, "prefix": "pushed", "art_path": source}],
    }
    art, ours = both_outcomes("s3_script", cases)

    assert art["latest"][:2] == ours["latest"][:2] == [4, None]
    assert art["not_after"][:2] == ours["not_after"][:2] == [[None, 1, 2, 4, 4], [None]]
    assert (art["latest"][2], ours["latest"][2]) == (9, 4)  # ART counts half a checkpoint
    assert (art["not_after"][2], ours["not_after"][2]) == ([4, 9], [4, 4])

    assert ours["pulled"] == art["pulled"]
    everything, one_step, no_trajectories = art["pulled"]
    assert len(everything) == 9 and "trajectories/train/0001.parquet" in everything
    assert sorted(one_step) == [
        "checkpoints/0002/adapter_config.json",
        "checkpoints/0002/adapter_model.safetensors",
    ]
    assert no_trajectories == {k: v for k, v in everything.items() if "trajectories" not in k}

    by_art, by_arthex = f"{BUCKET}/{art['pushed'][0]}", f"{BUCKET}/{ours['pushed'][0]}"
    assert server.keys(by_art) == server.keys(by_arthex) and len(server.keys(by_art)) == 9
    for key in server.keys(by_art):
        assert server.read(f"{by_art}/{key}") == server.read(f"{by_arthex}/{key}")
    # what ART pushed, arthex pulls: every file as it was
    there = tmp_path / "from-art"
    pulling = pull_model_from_s3(
        "agent", "proj", None, BUCKET, art["pushed"][0], art_path=str(there)
    )
    asyncio.run(pulling)
    pulled = there / "proj" / "models" / "agent"
    original = tmp_path / "source" / "proj" / "models" / "agent"
    assert files(pulled) == files(original) and len(files(original)) == 9
