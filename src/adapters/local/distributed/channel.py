"""The frontend's store as the channel between the frontend and its ranks.

The frontend hosts a torch.distributed TCPStore; ranks connect to it as clients and also hold
their process group's rendezvous in it. One "generation" of ranks (a start, until a failure
or close) keeps its keys under `g{n}/`, so ranks of a failed generation can never read the
next one's commands. Within a generation:

    config              JSON: the trainer settings and the world, set before ranks start
    joined/{rank}       counter: a rank claims its number (a second claimant is refused)
    hb/{rank}           counter: a rank's heartbeat, bumped every second
    errors              counter: bumped after a rank writes err/{rank}
    err/{rank}          JSON: the rank's last error (what, where, whether a peer caused it)
    cmd/{n}             JSON: the n-th command (op and arguments), read by every rank
    cmd/{n}/blob        bytes in parts (tensors: the packed batch), see `put_blob`
    out/{n}/{i}         JSON: rank 0's i-th reply to command n (a step's metrics, or done)
    abort               set by the frontend when it stops the generation

Values are JSON or torch tensors saved with `torch.save` and read back with
`weights_only=True`: the store listens on a network port, so nothing read from it is ever
unpickled as arbitrary objects. Large values travel in parts of at most 4 MiB (the libuv
store refuses messages above 8 MiB).
"""

from __future__ import annotations

import io
import json
import time
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

import torch
from torch._C._distributed_c10d import PrefixStore, Store, TCPStore

from ..packing import PackedBatch

PART_BYTES = 4 << 20
CONNECT_TIMEOUT = timedelta(seconds=60)
_POLL_START_S = 0.001
_POLL_MAX_S = 0.05


def connect(host: str, port: int, *, timeout: timedelta = CONNECT_TIMEOUT) -> Store:
    """A client of the frontend's store (a new connection: one per thread that uses it)."""
    return TCPStore(host, port, is_master=False, timeout=timeout, use_libuv=False)


class Channel:
    """Typed reads and writes on one generation's keys."""

    def __init__(self, store: Store, generation: int) -> None:
        self.generation = generation
        self.store: Store = PrefixStore(f"g{generation}/", store)

    # --- plain values ---------------------------------------------------------------------

    def put_json(self, key: str, value: Any) -> None:
        self.store.set(key, json.dumps(value))

    def has(self, key: str) -> bool:
        return bool(self.store.check([key]))

    def get_json(self, key: str) -> Any:
        return json.loads(self.store.get(key))

    def wait_json(self, key: str, check: Callable[[], None]) -> Any:
        """The value of `key` once it is set; `check()` runs between polls and may raise."""
        self.wait(key, check)
        return self.get_json(key)

    def wait(self, key: str, check: Callable[[], None]) -> None:
        """Poll for `key` (polling, not the store's blocking wait: that logs a warning per
        timeout, and a bounded wait is what lets `check` look at the ranks meanwhile)."""
        pause = _POLL_START_S
        while not self.store.check([key]):
            check()
            time.sleep(pause)
            pause = min(pause * 2, _POLL_MAX_S)

    def count(self, key: str, delta: int = 0) -> int:
        return int(self.store.add(key, delta))

    def delete(self, *keys: str) -> None:
        for key in keys:
            self.store.delete_key(key)

    # --- blobs ----------------------------------------------------------------------------

    def put_blob(self, key: str, data: bytes) -> None:
        """Parts first, then `key` = the number of parts, so a reader that sees `key` finds
        every part."""
        parts = [data[i : i + PART_BYTES] for i in range(0, len(data), PART_BYTES)] or [b""]
        for i, part in enumerate(parts):
            self.store.set(f"{key}/{i}", part)  # type: ignore[arg-type]  # bytes work; the stub says str
        self.store.set(key, str(len(parts)))

    def get_blob(self, key: str) -> bytes:
        count = int(self.store.get(key))
        return b"".join(bytes(self.store.get(f"{key}/{i}")) for i in range(count))

    def delete_blob(self, key: str) -> None:
        if not self.has(key):
            return
        count = int(self.store.get(key))
        self.delete(key, *(f"{key}/{i}" for i in range(count)))


# --- tensors -------------------------------------------------------------------------------


def encode_tensors(values: Mapping[str, Any]) -> bytes:
    buffer = io.BytesIO()
    torch.save(dict(values), buffer)
    return buffer.getvalue()


def decode_tensors(data: bytes) -> dict[str, Any]:
    loaded: dict[str, Any] = torch.load(io.BytesIO(data), weights_only=True)
    return loaded


_BATCH_TENSORS = (
    "tokens",
    "mask",
    "old_logprobs",
    "advantages",
    "weights",
    "position_ids",
    "segment_ids",
)
_BATCH_COUNTS = (
    "num_groups",
    "num_groups_trainable",
    "num_trajectories_trainable",
    "num_dropped_too_long",
)


def encode_batch(batch: PackedBatch) -> bytes:
    values: dict[str, Any] = {name: getattr(batch, name).cpu() for name in _BATCH_TENSORS}
    values.update({name: int(getattr(batch, name)) for name in _BATCH_COUNTS})
    return encode_tensors(values)


def decode_batch(data: bytes) -> PackedBatch:
    values = decode_tensors(data)
    fields: dict[str, Any] = {name: values[name] for name in _BATCH_TENSORS}
    fields.update({name: int(values[name]) for name in _BATCH_COUNTS})
    return PackedBatch(**fields)
