"""Scale beyond one disk: ParquetTrajectoryStore writing to S3 against writing to local disk.

The S3 server is moto's, on loopback, reached over HTTP by pyarrow's S3 filesystem: the
client-side work (serializing, compressing, multipart upload, publishing by server-side
copy) is real, the network is not. The batch is the logging benchmark's (1,000 trajectories
with tools and logprobs), written with `store.write` (no history): throughput is measured in
JSON bytes serialized per second and in parquet bytes landed per second.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import tempfile
import time
from pathlib import Path

import pyarrow.fs as pafs

from arthex.adapters.parquet.store import ParquetTrajectoryStore
from arthex.core.identity import RunRef
from arthex.core.trajectories import TrajectoryGroup

from ._table import print_table
from .bench_logging import _trajectories, build_batch

REPEATS = 3
BUCKET = "arthex-bench"
RUN = RunRef("bench", "s3")


def timed_writes(store: ParquetTrajectoryStore, groups: list[TrajectoryGroup]) -> float:
    """Best of REPEATS first writes of the batch (each at a fresh step)."""
    best = float("inf")
    for step in range(REPEATS):
        started = time.perf_counter()
        asyncio.run(store.write(RUN, "train", step, groups))
        best = min(best, time.perf_counter() - started)
    return best


def run() -> list[list[object]]:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    groups = build_batch()
    json_bytes = sum(len(t.model_dump_json().encode()) for t in _trajectories(groups))
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        s3 = pafs.S3FileSystem(
            endpoint_override=f"{host}:{port}", scheme="http", access_key="bench",
            secret_key="bench", region="us-east-1", allow_bucket_creation=True,
        )  # fmt: skip
        s3.create_dir(BUCKET)
        remote = ParquetTrajectoryStore(f"s3://{BUCKET}/{secrets.token_hex(4)}", filesystem=s3)
        with tempfile.TemporaryDirectory() as tmp:
            local = ParquetTrajectoryStore(str(Path(tmp) / "art"))
            asyncio.run(local.write(RUN, "warmup", 0, groups[:1]))
            asyncio.run(remote.write(RUN, "warmup", 0, groups[:1]))
            local_s = timed_writes(local, groups)
            remote_s = timed_writes(remote, groups)
            part_bytes = Path(local.parts(RUN, "train", 0)[0].path).stat().st_size
    finally:
        server.stop()
    return [
        ["local disk", local_s, json_bytes / local_s / 1e6, part_bytes / local_s / 1e6, 1.0],
        ["S3 (moto on loopback)", remote_s, json_bytes / remote_s / 1e6,
         part_bytes / remote_s / 1e6, local_s / remote_s],
    ]  # fmt: skip


def main() -> None:
    print_table(
        "Scale beyond one disk: store.write of 1,000 trajectories (best of 3)",
        ["where", "write (s)", "JSON MB/s", "parquet MB/s", "write throughput vs local"],
        run(),
    )  # fmt: skip


if __name__ == "__main__":
    main()
