"""`art.utils.output_dirs`, `art.utils.get_model_step` and `art.utils.grpo` under arthex:
the paths are ART's documented layout written out by hand
(`{art_path}/{project}/models/{run}/checkpoints/{step:04d}`, `.../trajectories/{split}`), the
step is the newest whole checkpoint folder made here, and zero variance is ART's rule (fewer
than two rewards, or all within 1e-12 of the first)."""

from __future__ import annotations

from pathlib import Path

import pytest

import arthex.art as art
from arthex.art.utils import output_dirs
from arthex.art.utils.get_model_step import get_model_step, get_step_from_dir
from arthex.art.utils.grpo import rewards_have_zero_variance
from arthex.core.errors import InvalidNameError


def test_the_paths_are_arts_layout() -> None:
    run = output_dirs.get_output_dir_from_model_properties("proj", "run-1", "/data/.art")
    assert run == "/data/.art/proj/models/run-1"
    assert output_dirs.get_models_dir("proj", "/data/.art/") == "/data/.art/proj/models"
    assert output_dirs.get_models_dir("proj") == ".art/proj/models"
    assert output_dirs.get_default_art_path() == ".art"
    assert output_dirs.get_step_checkpoint_dir(run, 7) == f"{run}/checkpoints/0007"
    assert output_dirs.get_step_checkpoint_dir(run, 12345) == f"{run}/checkpoints/12345"
    assert output_dirs.get_trajectories_dir(run) == f"{run}/trajectories"
    assert output_dirs.get_trajectories_split_dir(run, "val") == f"{run}/trajectories/val"


@pytest.mark.parametrize(
    "call",
    [
        lambda: output_dirs.get_trajectories_split_dir("/r", "../elsewhere"),
        lambda: output_dirs.get_models_dir("a/b"),
        lambda: output_dirs.get_output_dir_from_model_properties("proj", ".hidden"),
    ],
    ids=["split", "project", "name"],
)
def test_a_name_that_is_not_one_path_segment_is_refused(call: object) -> None:
    with pytest.raises(InvalidNameError, match="not a safe path segment"):
        call()  # type: ignore[operator]


def test_a_models_folder_is_under_its_base_path_and_named_by_its_run(tmp_path: Path) -> None:
    model = art.TrainableModel(
        name="alias", project="proj", run_name="run-7", base_model="tiny",
        base_path=str(tmp_path), report_metrics=[],
    )  # fmt: skip
    assert output_dirs.get_model_dir(model) == f"{tmp_path}/proj/models/run-7"
    assert output_dirs.get_model_dir(model, "/other") == "/other/proj/models/run-7"
    assert get_model_step(model) == 0
    adapter = tmp_path / "proj" / "models" / "run-7" / "checkpoints" / "0004"
    adapter.mkdir(parents=True)
    for name in ("adapter_model.safetensors", "adapter_config.json"):
        (adapter / name).write_bytes(b"{}")
    assert get_model_step(model) == 4
    assert get_model_step(model, str(tmp_path / "elsewhere")) == 0


def test_the_step_is_the_newest_whole_checkpoint_and_reading_creates_nothing(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "no-run"
    assert get_step_from_dir(str(missing)) == 0
    assert not missing.exists()  # ART's version makes the folder; this one only looks
    checkpoints = tmp_path / "run" / "checkpoints"
    for step in ("0003", "0012"):
        (checkpoints / step).mkdir(parents=True)
        for name in ("adapter_model.safetensors", "adapter_config.json"):
            (checkpoints / step / name).write_bytes(b"{}")
    (checkpoints / "0020").mkdir()  # an empty folder holds no weights to resume from
    (checkpoints / "notes").mkdir()
    assert get_step_from_dir(str(tmp_path / "run")) == 12


@pytest.mark.parametrize(
    ("rewards", "zero"),
    [([], True), ([0.5], True), ([1.0, 1.0, 1.0], True), ([1.0, 1.0 + 1e-13], True),
     ([1.0, 1.0 + 1e-11], False), ([0.0, 1.0], False), ([2.0, 2.0, -2.0], False)],
)  # fmt: skip
def test_zero_variance_is_arts_rule(rewards: list[float], zero: bool) -> None:
    assert rewards_have_zero_variance(rewards) is zero
