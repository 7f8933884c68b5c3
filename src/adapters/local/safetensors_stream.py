"""ART's streaming safetensors writer (`art.utils.safetensors`): CPU tensors written to a
.safetensors file straight from their memory, with no copy into Python bytes. Needs torch (the
`local` extra); the files are plain safetensors (`safetensors.torch.load_file` reads them).

`prepare_safetensors(tensors)` builds the file as a header plus one byte view per tensor, in
name order; `save_prepared_safetensors(prepared, path)` writes those views with vectored
writes, atomically (a temp file beside `path`, fsynced, renamed over it: a reader never sees a
half-written file). `SafetensorsLayout(tensors)` does the header work once for tensors whose
names, dtypes, shapes and storages stay put (a snapshot refreshed in place, step after step):
a storage that the tensors cover end to end is written as one chunk, and `bind(tensors)` checks
the layout still holds and gives the chunks without rebuilding anything. Tensors must be
contiguous, on the CPU, of a dtype safetensors names; the machine must be little-endian.
"""

from __future__ import annotations

import json
import os
import struct
import sys
from collections import deque
from pathlib import Path
from typing import NamedTuple

import attrs
import torch

from ..files import atomic_temp

__all__ = [
    "PreparedSafetensors",
    "SafetensorsLayout",
    "prepare_safetensors",
    "save_prepared_safetensors",
    "save_safetensors",
]

_NAMES: dict[str, str] = {
    "bool": "BOOL",
    "uint8": "U8",
    "int8": "I8",
    "int16": "I16",
    "int32": "I32",
    "int64": "I64",
    "float16": "F16",
    "bfloat16": "BF16",
    "float32": "F32",
    "float64": "F64",
    "complex64": "C64",
    "uint16": "U16",
    "uint32": "U32",
    "uint64": "U64",
    "float8_e4m3fn": "F8_E4M3",
    "float8_e5m2": "F8_E5M2",
}
# the safetensors name of each dtype this torch has (older ones lack the unsigned and fp8 types)
DTYPE_NAMES: dict[torch.dtype, str] = {
    getattr(torch, attribute): name
    for attribute, name in _NAMES.items()
    if isinstance(getattr(torch, attribute, None), torch.dtype)
}


class PreparedSafetensors(NamedTuple):
    """A whole file as byte tensors to write in order: the header, then the data."""

    chunks: tuple[torch.Tensor, ...]

    @property
    def nbytes(self) -> int:
        return sum(chunk.numel() for chunk in self.chunks)


def _check(name: str, tensor: torch.Tensor) -> None:
    if sys.byteorder != "little":
        raise RuntimeError("the streaming safetensors writer needs a little-endian machine")
    if tensor.device.type != "cpu" or not tensor.is_contiguous():
        raise RuntimeError(
            f"tensor {name!r} is not a contiguous tensor on the CPU; pass .contiguous().cpu()"
        )
    if tensor.dtype not in DTYPE_NAMES:
        raise RuntimeError(f"Unsupported safetensors dtype: {tensor.dtype} (tensor {name!r})")


def _header(entries: list[tuple[str, torch.dtype, tuple[int, ...], int, int]]) -> torch.Tensor:
    """The file's first bytes: the header's length (8 bytes, little-endian) and the JSON
    header (name -> dtype, shape, [start, end) in the data), padded with spaces to 8 bytes."""
    header = {
        name: {"dtype": DTYPE_NAMES[dtype], "shape": list(shape), "data_offsets": [start, end]}
        for name, dtype, shape, start, end in entries
    }
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)
    return torch.frombuffer(bytearray(struct.pack("<Q", len(encoded)) + encoded), dtype=torch.uint8)


def _bytes_of(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.reshape(-1).view(torch.uint8)


def prepare_safetensors(tensors: dict[str, torch.Tensor]) -> PreparedSafetensors:
    """The file of `tensors` (name -> tensor), each tensor's bytes in name order."""
    ordered = sorted(tensors.items())
    entries = []
    offset = 0
    for name, tensor in ordered:
        _check(name, tensor)
        entries.append((name, tensor.dtype, tuple(tensor.shape), offset, offset + tensor.nbytes))
        offset += tensor.nbytes
    return PreparedSafetensors((_header(entries), *(_bytes_of(t) for _, t in ordered)))


def _write_all(fd: int, views: list[memoryview]) -> None:
    """Write every view, in order, with as few system calls as the OS allows."""
    pending = deque(view for view in views if view.nbytes)
    most = os.sysconf("SC_IOV_MAX")
    while pending:
        written = os.writev(fd, [pending[i] for i in range(min(most, len(pending)))])
        if written <= 0:
            raise OSError(f"a vectored write wrote {written} bytes")
        while pending and written >= pending[0].nbytes:
            written -= pending.popleft().nbytes
        if written:
            pending[0] = pending[0][written:]


def save_prepared_safetensors(prepared: PreparedSafetensors, path: Path) -> None:
    """Write `prepared` to `path` atomically (the folder is created if missing)."""
    views = [chunk.numpy().data for chunk in prepared.chunks]
    with (
        atomic_temp(Path(path), prepared.nbytes) as temp,
        temp.open("wb", buffering=0) as output,
    ):
        _write_all(output.fileno(), views)


def save_safetensors(tensors: dict[str, torch.Tensor], path: Path) -> None:
    """Write `tensors` to `path` as a safetensors file, from their own memory."""
    save_prepared_safetensors(prepare_safetensors(tensors), path)


# -- a layout computed once, bound to the same tensors' memory each time ----------------------


@attrs.frozen
class _Placed:
    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    storage: int  # which of the layout's storages
    offset: int  # bytes from the storage's start
    nbytes: int


@attrs.frozen
class _Storage:
    nbytes: int
    chunks: tuple[tuple[int, int], ...]  # (offset, length) to write, in file order


def _storage_key(tensor: torch.Tensor) -> tuple[int, int]:
    storage = tensor.untyped_storage()
    return storage.data_ptr(), storage.nbytes()


def _offset(tensor: torch.Tensor) -> int:
    return tensor.data_ptr() - tensor.untyped_storage().data_ptr()


class SafetensorsLayout:
    """The file layout of `tensors`, for writing later snapshots of the same tensors."""

    def __init__(self, tensors: dict[str, torch.Tensor]) -> None:
        numbers: dict[tuple[int, int], int] = {}
        sizes: list[int] = []
        placed: list[_Placed] = []
        for name, tensor in sorted(tensors.items()):
            _check(name, tensor)
            key = _storage_key(tensor)
            if key not in numbers:
                numbers[key] = len(sizes)
                sizes.append(key[1])
            placed.append(
                _Placed(
                    name,
                    tensor.dtype,
                    tuple(tensor.shape),
                    numbers[key],
                    _offset(tensor),
                    tensor.nbytes,
                )
            )
        storages: list[_Storage] = []
        entries: list[tuple[str, torch.dtype, tuple[int, ...], int, int]] = []
        start = 0
        for number, size in enumerate(sizes):
            inside = [item for item in placed if item.storage == number]
            if _tiles(size, inside):
                # the tensors cover their storage end to end: write it as one chunk
                storages.append(_Storage(size, ((0, size),)))
                entries += [
                    (p.name, p.dtype, p.shape, start + p.offset, start + p.offset + p.nbytes)
                    for p in inside
                ]
                start += size
                continue
            storages.append(_Storage(size, tuple((p.offset, p.nbytes) for p in inside)))
            for p in inside:
                entries.append((p.name, p.dtype, p.shape, start, start + p.nbytes))
                start += p.nbytes
        entries.sort()
        self._placed = tuple(placed)
        self._storages = tuple(storages)
        self._header = _header(entries)

    def bind(self, tensors: dict[str, torch.Tensor]) -> PreparedSafetensors:
        """The file of `tensors` under this layout; RuntimeError when a tensor is missing or
        its dtype, shape, storage size, place in its storage or sharing has changed."""
        if set(tensors) != {p.name for p in self._placed}:
            missing = sorted({p.name for p in self._placed} - set(tensors))
            if missing:
                raise RuntimeError(
                    f"tensor {missing[0]} of the prepared layout is gone from the state"
                )
            raise RuntimeError("Safetensors tensor set changed")
        owners: list[torch.Tensor | None] = [None] * len(self._storages)
        for p in self._placed:
            tensor = tensors[p.name]
            _check(p.name, tensor)
            storage = tensor.untyped_storage()
            if (
                tensor.dtype != p.dtype
                or tuple(tensor.shape) != p.shape
                or storage.nbytes() != self._storages[p.storage].nbytes
                or _offset(tensor) != p.offset
            ):
                raise RuntimeError(f"Safetensors tensor layout changed: {p.name}")
            owner = owners[p.storage]
            if owner is None:
                whole = torch.empty(0, dtype=torch.uint8)
                owners[p.storage] = whole.set_(storage, 0, (storage.nbytes(),), (1,))
            elif owner.untyped_storage().data_ptr() != storage.data_ptr():
                raise RuntimeError("Safetensors storage aliasing changed")
        chunks = [self._header]
        for owner, layout in zip(owners, self._storages, strict=True):
            assert owner is not None  # every storage holds at least one tensor
            chunks += [owner.narrow(0, offset, length) for offset, length in layout.chunks]
        return PreparedSafetensors(tuple(chunks))


def _tiles(size: int, inside: list[_Placed]) -> bool:
    """Whether the tensors' byte ranges cover [0, size) exactly, without gap or overlap."""
    reached = 0
    for p in sorted(inside, key=lambda p: p.offset):
        if p.offset != reached:
            return False
        reached += p.nbytes
    return reached == size
