"""`arthex view` on a big run, against reading the same data directly.

- history: a ledger of 20,000 rows (ART's row format, 12 metrics each). Direct: the ledger's
  own reader (`read_rows`) and, as the floor, `json.loads` of each line. The viewer: the
  `/history` endpoint over HTTP, cold (its first read of the file) and warm (the rows are
  kept and only appended bytes are read), and a poll with `since=` that finds nothing new.
- a big step file: one `trajectories/train/0000.parquet` of `ARTHEX_BENCH_VIEW_MB` MB
  (default 300; 1 GB takes minutes to generate on a small machine) written in the store's own
  encoding (row groups of ~4 MB of JSON). Direct: reading the row group that holds the first
  20 groups (authoritative columns) and decoding those groups' rows with the store's
  decoder, the least any reader must do. The viewer: `/trajectories?limit=20` at offset 0,
  in the middle and at the end. For scale, how long reading the file's two JSON columns whole takes.
- memory: the viewer's resident set (psutil) before paging and its peak while paging through
  every group of the big file, 20 groups a request.

Run with `python -m benchmarks view`.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import httpx
import psutil
import pyarrow as pa
import pyarrow.parquet as pq

from arthex.adapters.jsonl_history import encode_row, read_rows
from arthex.adapters.parquet.decoding import decode
from arthex.adapters.parquet.encoding import encode_batches
from arthex.adapters.parquet.schema import AUTHORITATIVE, SCHEMA, WRITE_OPTIONS
from arthex.core.metrics import MetricsRow
from arthex.core.trajectories import Trajectory, TrajectoryGroup
from arthex.testing.builders import make_choice

from ._table import best_of, print_table

HISTORY_ROWS = 20_000
PAGE = 20
GROUP_SIZE = 8
CHUNK_GROUPS = 200  # groups encoded per call while writing the big file


def _history(path: Path) -> None:
    rng = random.Random(0)
    start = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
    with path.open("wb") as out:
        for i in range(HISTORY_ROWS):
            values = {f"train/m{k}": rng.random() for k in range(10)}
            values["train/reward"] = rng.random()
            values["loss/train"] = rng.random()
            row = MetricsRow(
                step=i // 2, values=values, recorded_at=datetime.fromtimestamp(start + i, UTC)
            )
            out.write(encode_row(row))


def _group(rng: random.Random, words: list[str], chars: int) -> TrajectoryGroup:
    trajectories = []
    for _ in range(GROUP_SIZE):
        text = " ".join(rng.choice(words) for _ in range(chars // 7))
        trajectories.append(
            Trajectory(
                messages_and_choices=[
                    {"role": "user", "content": text[: chars // 4]},
                    make_choice(text, token_ids=[1, 2, 3], logprobs=-0.5),
                ],
                reward=rng.random(),
            )
        )
    return TrajectoryGroup(trajectories)


def _step_file(path: Path, megabytes: int) -> int:
    """Write groups until the file holds `megabytes` MB; returns how many groups it holds."""
    rng = random.Random(1)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(rng.choice(letters) for _ in range(6)) for _ in range(50_000)]
    path.parent.mkdir(parents=True, exist_ok=True)
    groups = 0
    with pq.ParquetWriter(str(path), SCHEMA, **WRITE_OPTIONS) as writer:
        while path.stat().st_size < megabytes << 20:
            chunk = [_group(rng, words, 3000) for _ in range(CHUNK_GROUPS)]
            for batch in encode_batches(chunk):
                table = batch.table
                shifted = pa.compute.add(table.column("group_index"), groups)
                writer.write_table(table.set_column(1, SCHEMA.field(1), shifted))
            groups += len(chunk)
    return groups


def _serve(base: Path) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "arthex.apps.cli", "view", str(base), "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    return process, process.stdout.readline().strip().rstrip("/")


def _timed(run: Callable[[], object]) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def main() -> None:
    megabytes = int(os.environ.get("ARTHEX_BENCH_VIEW_MB", "300"))
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        run = base / "bench" / "models" / "big"
        run.mkdir(parents=True)
        history = run / "history.jsonl"
        _history(history)
        step_file = run / "trajectories" / "train" / "0000.parquet"
        started = time.perf_counter()
        groups = _step_file(step_file, megabytes)
        written = time.perf_counter() - started
        size = step_file.stat().st_size
        process, url = _serve(base)
        try:
            client = httpx.Client(timeout=600)
            api = f"{url}/api/runs/bench/big"

            # --- history ----------------------------------------------------------------
            lines = history.read_bytes().splitlines()
            floor = best_of(3, lambda: [json.loads(line) for line in lines])
            direct = best_of(3, lambda: [r.to_json() for r in read_rows(history)])
            cold = _timed(lambda: client.get(f"{api}/history").raise_for_status())
            warm = best_of(3, lambda: client.get(f"{api}/history").raise_for_status())
            cursor = client.get(f"{api}/history").json()["next"]
            poll = best_of(5, lambda: client.get(f"{api}/history", params={"since": cursor}))
            print_table(
                f"history endpoint, {HISTORY_ROWS:,} rows ({history.stat().st_size >> 20} MB)",
                ["read", "seconds", "x json.loads floor"],
                [
                    ["json.loads per line (floor)", floor, 1.0],
                    ["read_rows + to_json (the ledger's reader)", direct, direct / floor],
                    ["viewer /history, cold", cold, cold / floor],
                    ["viewer /history, warm", warm, warm / floor],
                    ["viewer /history?since=next (a poll)", poll, poll / floor],
                ],
            )

            # --- first page of the big step file ----------------------------------------
            def first_row_group() -> None:
                file = pq.ParquetFile(str(step_file))
                table = file.read_row_group(0, columns=AUTHORITATIVE)
                first = table.filter(pa.compute.less(table.column("group_index"), PAGE))
                assert len(decode(str(step_file), first)) == PAGE

            direct_page = best_of(3, first_row_group)
            whole_json = _timed(
                lambda: pq.read_table(str(step_file), columns=["trajectory_json", "group_json"])
            )

            def page(offset: int) -> httpx.Response:
                params: dict[str, str | int] = {
                    "split": "train",
                    "step": 0,
                    "limit": PAGE,
                    "offset": offset,
                }
                return client.get(f"{api}/trajectories", params=params).raise_for_status()

            pages = {}
            for where, at in (("first", 0), ("middle", groups // 2), ("last", groups - PAGE)):
                pages[where] = best_of(3, lambda at=at: page(at))  # type: ignore[misc]
            print_table(
                f"a page of {PAGE} groups from a {size / 2**20:.0f} MB step file "
                f"({groups:,} groups of {GROUP_SIZE}; written in {written:.0f} s)",
                ["read", "seconds", "x direct row group"],
                [
                    ["direct: first row group + decode", direct_page, 1.0],
                    ["viewer page 1", pages["first"], pages["first"] / direct_page],
                    ["viewer middle page", pages["middle"], pages["middle"] / direct_page],
                    ["viewer last page", pages["last"], pages["last"] / direct_page],
                    ["(scale) both JSON columns, whole file", whole_json,
                     whole_json / direct_page],
                ],
            )  # fmt: skip

            # --- memory while paging ----------------------------------------------------
            viewer = psutil.Process(process.pid)
            rss_before = viewer.memory_info().rss
            samples = []
            for offset in range(0, groups, PAGE):
                page(offset)
                samples.append(viewer.memory_info().rss)
            print_table(
                f"viewer resident memory paging through all {groups:,} groups ({len(samples)} "
                f"requests) of the {size / 2**20:.0f} MB file",
                ["measure", "MB"],
                [
                    ["before paging", rss_before / 2**20],
                    ["median while paging", statistics.median(samples) / 2**20],
                    ["peak while paging", max(samples) / 2**20],
                    ["after the last page", samples[-1] / 2**20],
                    ["step file size", size / 2**20],
                ],
            )
        finally:
            process.terminate()
            process.wait(timeout=30)


if __name__ == "__main__":
    main()
