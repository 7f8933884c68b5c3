"""A failing object store: the parquet trajectory store on S3 (moto's server) reached through a
fault-injecting proxy on loopback (tests/faults/_s3_proxy.py) that answers 503 SlowDown or 500,
resets connections, delays replies past the client's timeout, or lets a write land on the
server and then loses its reply.

Each store call is tried again within the store's retry budget; a write tried again never
stores its groups twice; a store that stays down fails the call with one StoreUnavailableError
line naming the key and the budget, and the same call succeeds once the store is back. Before
the fix every fault here surfaced as pyarrow's raw OSError (SLOW_DOWN, INTERNAL_FAILURE,
NETWORK_CONNECTION, a curl timeout); plain latency under the client's timeout already worked.
"""

from __future__ import annotations

import asyncio
import faulthandler
import logging
import secrets
from collections.abc import Iterator
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from arthex.adapters.parquet.store import ParquetTrajectoryStore
from arthex.core.errors import StoreUnavailableError
from arthex.core.identity import ModelSpec, RunRef
from arthex.core.trajectories import TrajectoryGroup
from arthex.testing.builders import make_group
from arthex.testing.contracts.trajectory_store import assert_groups_identical
from tests.faults._s3_proxy import FaultProxy, Faults

pytestmark = pytest.mark.faults

BUCKET = "arthex-faults"
RUN = RunRef("proj", "run-1")
STEP_FILE = "/0003.parquet"


class Stack:
    """moto's S3 server on loopback, the fault proxy in front of it, filesystems through it."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.server.start()
        host, port = self.server.get_host_and_port()
        self.proxy = FaultProxy(f"{host}:{port}")
        # the test's own way past the proxy: patient (moto's first answer, on a busy machine,
        # takes seconds), so only the filesystems under test meet the one-second timeouts
        self.direct = self.filesystem(
            f"{host}:{port}", sdk_attempts=5, bucket_creation=True, timeout=30
        )
        self.direct.create_dir(BUCKET)

    def filesystem(
        self,
        endpoint: str | None = None,
        sdk_attempts: int = 1,
        bucket_creation: bool = False,
        timeout: float = 1,
    ) -> pafs.S3FileSystem:
        """`sdk_attempts=1` leaves every retry to arthex, so each fault reaches it."""
        return pafs.S3FileSystem(
            endpoint_override=endpoint or self.proxy.endpoint, scheme="http",
            access_key="testing", secret_key="testing", region="us-east-1",
            connect_timeout=timeout, request_timeout=timeout,
            allow_bucket_creation=bucket_creation,
            retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=sdk_attempts),
        )  # fmt: skip

    def store(self, budget: float = 20.0, sdk_attempts: int = 1) -> ParquetTrajectoryStore:
        prefix = f"{BUCKET}/{secrets.token_hex(6)}"
        fs = self.filesystem(sdk_attempts=sdk_attempts)
        return ParquetTrajectoryStore(prefix, filesystem=fs, retry_budget=budget)

    def keys(self, store: ParquetTrajectoryStore) -> list[str]:
        """Every object under the store's root, read past the proxy."""
        selector = pafs.FileSelector(store.base, recursive=True, allow_not_found=True)
        infos = self.direct.get_file_info(selector)
        return sorted(i.path[len(store.base) + 1 :] for i in infos if i.type == pafs.FileType.File)


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    made = Stack()
    yield made
    made.proxy.stop()
    made.server.stop()


@pytest.fixture
def faults(stack: Stack) -> Iterator[Faults]:
    faulthandler.dump_traceback_later(120, exit=True)  # bound each test: never hang the suite
    stack.proxy.faults.clear()
    yield stack.proxy.faults
    stack.proxy.faults.clear()
    faulthandler.cancel_dump_traceback_later()


def write(store: ParquetTrajectoryStore, groups: list[TrajectoryGroup]) -> str:
    return asyncio.run(store.write(RUN, "train", 3, groups))


def read(store: ParquetTrajectoryStore) -> list[TrajectoryGroup]:
    return asyncio.run(store.read(RUN, "train", 3))


def groups(n: int, tag: str) -> list[TrajectoryGroup]:
    return [make_group(metadata={"tag": f"{tag}{i}"}) for i in range(n)]


def to_step_file(method: str, path: str, headers: dict[str, str]) -> bool:
    """The server-side copy that publishes the step file."""
    return method == "PUT" and path.endswith(STEP_FILE) and "x-amz-copy-source" in headers


def test_slowdown_bursts_are_waited_out(stack: Stack, faults: Faults) -> None:
    # Six 503 SlowDown in a row outlast the SDK's own three attempts (the default strategy).
    store = stack.store(sdk_attempts=3)
    rule = faults.add("slowdown", times=6)
    path = write(store, groups(2, "a"))
    assert rule.hits == 6
    assert path.startswith(f"s3://{store.base}/") and path.endswith(STEP_FILE)
    faults.add("slowdown", times=6, match=lambda m, p, h: m == "GET")
    assert_groups_identical(groups(2, "a"), read(store))
    assert stack.keys(store) == ["proj/models/run-1/trajectories/train/0003.parquet"]


def test_errors_resets_and_timeouts_on_reads_are_tried_again(stack: Stack, faults: Faults) -> None:
    store = stack.store()
    write(store, groups(3, "r"))
    rules = [
        faults.add("error500", times=2, match=lambda m, p, h: m == "GET"),
        faults.add("reset", times=2, match=lambda m, p, h: m in ("GET", "HEAD")),
        faults.add("delay", times=1, delay=2.5, match=lambda m, p, h: m == "GET"),
    ]
    assert_groups_identical(groups(3, "r"), read(store))
    assert [rule.hits for rule in rules] == [2, 2, 1]
    faults.add("reset", times=3)
    assert asyncio.run(store.steps(RUN, "train")) == [3]


def test_latency_under_the_timeout_changes_nothing(stack: Stack, faults: Faults) -> None:
    store = stack.store()
    rule = faults.add("delay", times=None, delay=0.1)
    write(store, groups(2, "l"))
    write(store, groups(1, "m"))
    assert_groups_identical([*groups(2, "l"), *groups(1, "m")], read(store))
    assert rule.hits > 0


@pytest.mark.parametrize("second", [False, True], ids=["new-step-file", "added-to-step-file"])
def test_a_write_whose_reply_was_lost_is_stored_once(
    stack: Stack, faults: Faults, second: bool
) -> None:
    store = stack.store()
    if second:
        write(store, groups(2, "old"))
    rule = faults.add("lost", times=1, match=to_step_file)
    write(store, groups(2, "new"))
    assert rule.hits == 1  # the copy landed on the server and its reply was lost
    expected = [*(groups(2, "old") if second else []), *groups(2, "new")]
    assert_groups_identical(expected, read(store))
    assert stack.keys(store) == ["proj/models/run-1/trajectories/train/0003.parquet"]


@pytest.mark.slow
@pytest.mark.parametrize("lost", ["UploadPart", "CompleteMultipartUpload"])
def test_lost_replies_of_a_multipart_upload_store_the_groups_once(
    stack: Stack, faults: Faults, lost: str
) -> None:
    store = stack.store()
    # Over pyarrow's 5 MiB part size (and incompressible), the temp object goes up in parts.
    big = [make_group((1.0,), prompt=secrets.token_urlsafe(6 << 20), metadata={"tag": "big"})]

    def is_lost(method: str, path: str, headers: dict[str, str]) -> bool:
        if lost == "UploadPart":
            return method == "PUT" and "partNumber=" in path
        return method == "POST" and "uploadId=" in path

    rule = faults.add("lost", times=1, match=is_lost)
    write(store, big)
    assert rule.hits == 1
    assert_groups_identical(big, read(store))
    assert stack.keys(store) == ["proj/models/run-1/trajectories/train/0003.parquet"]


def test_a_store_that_stays_down_fails_in_one_line_and_the_run_resumes(
    stack: Stack, faults: Faults
) -> None:
    store = stack.store(budget=1.5)
    write(store, groups(1, "before"))
    faults.add("reset", times=None)
    with pytest.raises(StoreUnavailableError) as failed:
        write(store, groups(2, "during"))
    message = str(failed.value)
    assert "\n" not in message
    assert f"writing s3://{store.base}/proj/models/run-1/trajectories/train/0003.parquet" in message
    assert "1.5 s retry budget" in message
    with pytest.raises(StoreUnavailableError, match=r"reading s3://arthex-faults/.*1\.5 s"):
        read(store)
    spec = ModelSpec(RUN, base_model="tiny")
    with pytest.raises(StoreUnavailableError, match=r"model\.json.*1\.5 s"):
        asyncio.run(store.write_model_spec(spec))
    faults.clear()  # the store is back: the same calls go through, nothing is stored twice
    write(store, groups(2, "during"))
    asyncio.run(store.write_model_spec(spec))
    assert_groups_identical([*groups(1, "before"), *groups(2, "during")], read(store))
    assert stack.keys(store) == [
        "proj/models/run-1/model.json",
        "proj/models/run-1/trajectories/train/0003.parquet",
    ]


def test_a_missing_bucket_is_not_retried(stack: Stack, faults: Faults) -> None:
    fs = stack.filesystem()
    store = ParquetTrajectoryStore("no-such-bucket-x/p", filesystem=fs, retry_budget=30)
    before = len(faults.log)
    with pytest.raises(OSError) as failed:
        write(store, groups(1, "x"))
    assert not isinstance(failed.value, StoreUnavailableError)
    assert len(faults.log) - before < 10  # failed at once, not tried again for 30 s


# -- a run folder pushed and pulled (arthex.art.utils.s3) through the same proxy ---------------


def run_folder(root: Path) -> dict[str, bytes]:
    """`{root}/proj/models/agent/`: a history and two checkpoints; its files by relative path."""
    files = {
        "history.jsonl": b'{"step": 1}\n',
        **{f"checkpoints/{s:04d}/model.safetensors": secrets.token_bytes(5000) for s in (1, 2)},
        **{f"checkpoints/{s:04d}/trainer_state.json": b'{"format": 1}' for s in (1, 2)},
    }
    for relative, data in files.items():
        path = root / "proj" / "models" / "agent" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return files


def test_a_run_folder_sync_waits_out_slowdowns_and_fails_in_one_line_naming_the_key(
    stack: Stack, faults: Faults, tmp_path: Path
) -> None:
    from arthex.art.utils.s3 import S3SyncError, pull_model_from_s3, push_model_to_s3

    files = run_folder(tmp_path / "here")
    prefix = secrets.token_hex(6)
    filesystem = stack.filesystem()
    rule = faults.add("slowdown", times=4)
    asyncio.run(
        push_model_to_s3(
            "agent", "proj", BUCKET, prefix, art_path=str(tmp_path / "here"),
            filesystem=filesystem, retry_budget=20,
        )
    )  # fmt: skip
    assert rule.hits == 4
    base = f"{BUCKET}/{prefix}/proj/models/agent"
    selector = pafs.FileSelector(base, recursive=True)
    keys = [i.path for i in stack.direct.get_file_info(selector) if i.type == pafs.FileType.File]
    assert sorted(k[len(base) + 1 :] for k in keys) == sorted(files)

    def pull(budget: float) -> str:
        return asyncio.run(
            pull_model_from_s3(
                "agent", "proj", None, BUCKET, prefix, art_path=str(tmp_path / "there"),
                filesystem=filesystem, retry_budget=budget,
            )
        )  # fmt: skip

    weights = f"/{base}/checkpoints/0002/model.safetensors"
    faults.add("slowdown", times=None, match=lambda m, p, h: m == "GET" and p.startswith(weights))
    with pytest.raises(S3SyncError) as failed:
        pull(budget=1.5)
    message = str(failed.value)
    assert "\n" not in message
    assert message.startswith(f"copying s3://{base}/checkpoints/0002/model.safetensors to ")
    assert "1.5 s retry budget" in message
    # the proxy's 503 SlowDown, as the SDK names it: by its code when it parses the reply's
    # body, by its status (SERVICE_UNAVAILABLE, empty message) for some GetObject attempts,
    # more of them on a loaded machine
    assert "SLOW_DOWN" in message or "SERVICE_UNAVAILABLE" in message, message
    there = tmp_path / "there" / "proj" / "models" / "agent"
    for path in there.rglob("*"):  # what did land is whole, and no half-written file is left
        if path.is_file():
            assert path.read_bytes() == files[path.relative_to(there).as_posix()]
    assert not (there / "checkpoints" / "0002" / "trainer_state.json").exists()  # not whole yet

    faults.clear()
    faults.add("slowdown", times=None)
    with pytest.raises(S3SyncError, match=rf"^looking up s3://{BUCKET} failed: .*1\.5 s retry"):
        pull(budget=1.5)
    faults.clear()  # the store is back: the same pull completes
    pull(budget=20)
    pulled = {p.relative_to(there).as_posix(): p.read_bytes() for p in there.rglob("*")
              if p.is_file()}  # fmt: skip
    assert pulled == files
