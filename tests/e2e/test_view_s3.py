"""`arthex view s3://...`: a run on the S3 stand-in (moto's server on loopback, as in
test_s3_store.py), read over HTTP by pyarrow's S3 filesystem exactly as a bucket on AWS."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Iterator

import pyarrow.fs as pafs
import pytest

from arthex.adapters.parquet.store import ParquetTrajectoryStore
from arthex.core.identity import RunRef
from tests._s3_server import KEY, REGION, S3, SECRET
from tests._view_runs import PLANTED, VAL_MEANS, Viewer, build_runs, val_groups, viewer

pytestmark = pytest.mark.e2e

AGENT = "/api/runs/proj/agent"


@pytest.fixture(scope="module")
def s3() -> Iterator[S3]:
    server = S3()
    yield server
    server.server.stop()


@pytest.fixture(scope="module")
def prefix(s3: S3, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The runs built locally, copied into the bucket; then one more val step written by the
    trajectory store straight to S3."""
    local = build_runs(tmp_path_factory.mktemp("runs"))
    where = s3.prefix()
    pafs.copy_files(str(local), where, pafs.LocalFileSystem(), s3.filesystem)
    store = ParquetTrajectoryStore(where, filesystem=s3.filesystem)
    asyncio.run(store.write(RunRef("proj", "agent"), "val", 7, val_groups(2)))
    return where


def contents(s3: S3, prefix: str) -> dict[str, str]:
    found = {}
    for key in s3.keys(prefix):
        with s3.filesystem.open_input_stream(f"{prefix}/{key}") as stream:
            found[key] = hashlib.sha256(stream.read()).hexdigest()
    return found


@pytest.fixture(scope="module")
def view(s3: S3, prefix: str) -> Iterator[Viewer]:
    uri = f"s3://{prefix}?endpoint_override={s3.endpoint}&scheme=http"
    env = {
        "AWS_ACCESS_KEY_ID": KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_REGION": REGION,
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    with viewer([uri], env=env) as running:
        yield running


def test_every_endpoint_reads_the_run_from_the_bucket(view: Viewer, s3: S3, prefix: str) -> None:
    before = contents(s3, prefix)
    runs = {f"{r['project']}/{r['name']}": r for r in view.json("/api/runs")["runs"]}
    assert set(runs) == {"proj/agent", "other/evals"}
    agent = runs["proj/agent"]
    assert agent["path"] == f"s3://{prefix}/proj/models/agent"
    assert agent["splits"]["val"] == [0, 1, 2, 3, 7]
    assert agent["best"]["step"] == 1 and agent["best"]["value"] == pytest.approx(max(VAL_MEANS))
    assert agent["errors"] == []
    with s3.filesystem.open_input_stream(f"{prefix}/proj/models/agent/history.jsonl") as f:
        written = [json.loads(line) for line in f.read().decode().splitlines()]
    history = view.json(f"{AGENT}/history")
    assert history["rows"] == written
    assert view.json(f"{AGENT}/history", since=history["next"])["rows"] == []
    page = view.json(f"{AGENT}/trajectories", split="val", step=7, offset=1, limit=1)
    assert page["total"] == 2 and page["errors"] == []
    assert page["groups"][0]["trajectories"][0]["messages"][-1]["content"] == PLANTED
    assert view.json(f"{AGENT}/trajectories", split="val", step=7, q="poseidonia")["total"] == 1
    checkpoints = view.json(f"{AGENT}/checkpoints")
    assert [c["step"] for c in checkpoints["checkpoints"]] == [0, 1, 2, 3]
    assert {c["step"] for c in checkpoints["checkpoints"] if c["kept"]} == {1, 3}
    assert contents(s3, prefix) == before  # nothing written to the bucket


def test_a_damaged_step_file_in_the_bucket_is_named(view: Viewer, s3: S3, prefix: str) -> None:
    bad = f"{prefix}/proj/models/agent/trajectories/train/0001.parquet"
    with s3.filesystem.open_output_stream(bad) as out:
        out.write(b"not parquet")
    broken = view.json(f"{AGENT}/trajectories", split="train", step=1)
    assert broken["groups"] == [] and len(broken["errors"]) == 1
    assert f"s3://{bad}" in broken["errors"][0]
    assert view.json(f"{AGENT}/trajectories", split="train", step=0)["errors"] == []


def test_the_page_itself_is_served_too(view: Viewer) -> None:
    assert "arthex view" in view.get("/").text
    assert view.get("/static/vendor/uplot/uPlot.iife.min.js").status_code == 200
