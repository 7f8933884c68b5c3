"""ART 0.5.23's torch utilities, `utils.group_aggregate` and `utils.safetensors`, against
arthex's under `arthex.art`. ART's venv has no torch, so ART's two module files (each needs
only torch and the stdlib) are read from ART's installed package and run here, with this
venv's torch: the same statistics to the bit, and the same file bytes."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import pytest

from .art_env import art_environment, art_python

if TYPE_CHECKING:
    import torch

torch = pytest.importorskip("torch")

from arthex.art.utils import group_aggregate as ours_aggregate  # noqa: E402
from arthex.art.utils import safetensors as ours_safetensors  # noqa: E402

REDUCTIONS: tuple[ours_aggregate.Reduction, ...] = (
    "sum",
    "mean",
    "var",
    "std",
    "count",
    "min",
    "max",
)


@pytest.fixture(scope="module")
def art_utils() -> dict[str, ModuleType]:
    """ART's own module files, located by ART's interpreter (without importing `art`)."""
    code = "import importlib.util, json; print(json.dumps(list(importlib.util.find_spec('art')" \
        ".submodule_search_locations)))"  # fmt: skip
    done = subprocess.run([str(art_python()), "-c", code], capture_output=True, text=True,
                          env=art_environment(), check=True, timeout=120)  # fmt: skip
    (package,) = json.loads(done.stdout)
    modules = {}
    for name in ("group_aggregate", "safetensors"):
        spec = importlib.util.spec_from_file_location(
            f"art_0_5_23_{name}", Path(package) / "utils" / f"{name}.py"
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        modules[name] = module
    return modules


def test_group_aggregate_gives_arts_numbers(art_utils: dict[str, ModuleType]) -> None:
    generator = torch.Generator().manual_seed(23)
    art = art_utils["group_aggregate"].group_aggregate
    for shape, dtype in (((2, 10), torch.float64), ((3, 7, 4), torch.float32),
                         ((2, 5, 2, 3), torch.float64), ((1, 1), torch.float32)):  # fmt: skip
        values = torch.randn(*shape, generator=generator, dtype=dtype)
        by = torch.randint(0, 4, shape[:2], generator=generator) * 7 - 3
        for reduce in REDUCTIONS:
            for broadcast in (True, False):
                for eps in (1e-8, 0.5):
                    expected = art(values, by=by, reduce=reduce, broadcast=broadcast, eps=eps)
                    got = ours_aggregate.group_aggregate(
                        values, by=by, reduce=reduce, broadcast=broadcast, eps=eps
                    )
                    assert got.shape == expected.shape and got.dtype == expected.dtype
                    assert torch.equal(got, expected), (shape, reduce, broadcast, eps)


def tensor_sets() -> list[dict[str, torch.Tensor]]:
    flat = torch.arange(24, dtype=torch.float32)
    gappy = torch.arange(30, dtype=torch.int16)
    return [
        {"b": flat[:12].view(3, 4), "a": flat[12:], "s": torch.tensor(3.5)},
        {"z": torch.tensor([1, 2], dtype=torch.bfloat16), "e": torch.empty(0, 3),
         "m": torch.tensor([True, False]), "i": torch.tensor([-1], dtype=torch.int64)},
        {"x": gappy[2:10], "y": gappy[20:25], "w": gappy[0:30]},
    ]  # fmt: skip


def test_safetensors_files_are_arts_bytes(art_utils: dict[str, ModuleType], tmp_path: Path) -> None:
    art = art_utils["safetensors"]
    for index, tensors in enumerate(tensor_sets()):
        theirs, mine = tmp_path / f"art-{index}.safetensors", tmp_path / f"ours-{index}.safetensors"
        art.save_safetensors(tensors, theirs)
        ours_safetensors.save_safetensors(tensors, mine)
        assert mine.read_bytes() == theirs.read_bytes()
        art.save_prepared_safetensors(art.SafetensorsLayout(tensors).bind(tensors), theirs)
        layout = ours_safetensors.SafetensorsLayout(tensors)
        ours_safetensors.save_prepared_safetensors(layout.bind(tensors), mine)
        assert mine.read_bytes() == theirs.read_bytes()
        assert layout.bind(tensors).nbytes == art.SafetensorsLayout(tensors).bind(tensors).nbytes
