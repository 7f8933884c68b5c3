"""ART's streaming safetensors writer (`arthex.art.utils.safetensors`): real files, read back
by the safetensors library, and the file's bytes checked against the format by hand."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    import torch

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")

from arthex.art.utils.safetensors import (  # noqa: E402
    PreparedSafetensors,
    SafetensorsLayout,
    prepare_safetensors,
    save_prepared_safetensors,
    save_safetensors,
)


def tensors() -> dict[str, torch.Tensor]:
    return {
        "layer.weight": torch.arange(12, dtype=torch.float32).reshape(3, 4),
        "bias": torch.tensor([0.5, -1.5], dtype=torch.bfloat16),
        "mask": torch.tensor([True, False, True]),
        "step": torch.tensor(7, dtype=torch.int64),
        "nothing": torch.empty(0, 5, dtype=torch.float16),
    }


def assert_same(read: dict[str, torch.Tensor], written: dict[str, torch.Tensor]) -> None:
    assert sorted(read) == sorted(written)
    for name, tensor in written.items():
        assert read[name].dtype == tensor.dtype and torch.equal(read[name], tensor), name


def test_a_file_is_read_back_whole_by_the_safetensors_library(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "model.safetensors"
    save_safetensors(tensors(), path)
    assert_same(safetensors_torch.load_file(path), tensors())
    assert [p.name for p in path.parent.iterdir()] == ["model.safetensors"]  # no temp left


def test_the_bytes_are_the_format_worked_by_hand(tmp_path: Path) -> None:
    path = tmp_path / "two.safetensors"
    save_safetensors(
        {"b": torch.tensor([1.0, 2.0]), "a": torch.tensor([3], dtype=torch.int16)}, path
    )
    header = b'{"a":{"dtype":"I16","shape":[1],"data_offsets":[0,2]},' + (
        b'"b":{"dtype":"F32","shape":[2],"data_offsets":[2,10]}}'
    )
    header += b" " * (-len(header) % 8)
    data = struct.pack("<h", 3) + struct.pack("<2f", 1.0, 2.0)
    assert path.read_bytes() == struct.pack("<Q", len(header)) + header + data
    prepared = prepare_safetensors({"a": torch.tensor([3], dtype=torch.int16)})
    assert isinstance(prepared, PreparedSafetensors)
    assert prepared.nbytes == 8 + 56 + 2  # length, the header padded to 56, the data


def test_a_layout_is_bound_again_to_tensors_changed_in_place(tmp_path: Path) -> None:
    flat = torch.arange(10, dtype=torch.float32)
    weights = {"first": flat[:6].view(2, 3), "second": flat[6:]}  # one storage, end to end
    gappy = torch.zeros(8, dtype=torch.int32)
    weights |= {"x": gappy[1:3], "y": gappy[5:8]}  # one storage with gaps: written per tensor
    layout = SafetensorsLayout(weights)
    prepared = layout.bind(weights)
    # the header, one chunk for the covered storage, one chunk per tensor of the other
    assert len(prepared.chunks) == 4
    path = tmp_path / "snapshot.safetensors"
    save_prepared_safetensors(prepared, path)
    assert_same(safetensors_torch.load_file(path), weights)
    flat.mul_(2)
    gappy[5:8] = torch.tensor([4, 5, 6], dtype=torch.int32)
    save_prepared_safetensors(layout.bind(weights), path)  # the same layout, new values
    read = safetensors_torch.load_file(path)
    assert read["second"].tolist() == [12.0, 14.0, 16.0, 18.0]
    assert read["y"].tolist() == [4, 5, 6]


def test_a_layout_refuses_tensors_that_moved() -> None:
    weights = {"w": torch.zeros(4), "v": torch.zeros(2)}
    layout = SafetensorsLayout(weights)
    with pytest.raises(RuntimeError, match="tensor v of the prepared layout is gone"):
        layout.bind({"w": weights["w"]})
    with pytest.raises(RuntimeError, match="tensor set changed"):
        layout.bind({**weights, "extra": torch.zeros(1)})
    with pytest.raises(RuntimeError, match="layout changed: w"):
        layout.bind({"w": torch.zeros(5), "v": weights["v"]})
    with pytest.raises(RuntimeError, match="layout changed: w"):
        layout.bind({"w": weights["w"].to(torch.float64), "v": weights["v"]})
    shared = torch.zeros(6)
    layout = SafetensorsLayout({"a": shared[:3], "b": shared[3:]})
    with pytest.raises(RuntimeError, match="aliasing changed"):
        layout.bind({"a": shared[:3], "b": torch.zeros(6)[3:]})


def test_bad_tensors_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    path = tmp_path / "bad.safetensors"
    for tensor, message in (
        (torch.zeros(3, 4).t(), "not a contiguous tensor on the CPU"),
        (torch.zeros(2, dtype=torch.complex128), "Unsupported safetensors dtype"),
    ):
        with pytest.raises(RuntimeError, match=message):
            save_safetensors({"ok": torch.zeros(1), "bad": tensor}, path)
    assert list(tmp_path.iterdir()) == []
