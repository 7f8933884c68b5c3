"""What ART's Tinker backends leave in a model directory (art_state.py): TinkerNativeBackend's
keys in state.json and TinkerBackend's checkpoints/NNNN/info.yaml. A malformed key is refused,
naming the file and the key, before anything is written or asked of the service; a run ART
left with no training checkpoint starts over at step 0, as ART's does; ART's checkpoints are
found the way ART finds them. (Adopting runs ART really trained, on the emulator:
tests/interop/test_art_tinker_resume.py.)"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("tinker")

from arthex.adapters.tinker.art_state import (
    STATE_KEY_LATEST_STEP,
    STATE_KEY_RUN_IDS,
    Listed,
    adopted_record,
    art_checkpoints,
    read_art_checkpoint_folders,
    read_art_state,
)
from arthex.adapters.tinker.record import Checkpoint
from arthex.core.errors import CorruptDataError
from tests.unit.test_tinker_datums import RUN, FakeTinker, make_backend, spec


@pytest.fixture(autouse=True)
def _in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def model_dir(tmp_path: Path) -> Path:
    folder = tmp_path / RUN.project / "models" / RUN.name
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def register(tmp_path: Path, fake: FakeTinker) -> int:
    backend = make_backend(fake, tmp_path)

    async def main() -> int:
        try:
            await backend.register(spec())
            return await backend.get_step(RUN)
        finally:
            await backend.close()

    return asyncio.run(main())


MALFORMED: list[tuple[Any, str]] = [
    ({STATE_KEY_RUN_IDS: "run-a"}, STATE_KEY_RUN_IDS),
    ({STATE_KEY_RUN_IDS: [7]}, STATE_KEY_RUN_IDS),
    ({STATE_KEY_RUN_IDS: [""]}, STATE_KEY_RUN_IDS),
    ({STATE_KEY_RUN_IDS: ["run-a/../b"]}, STATE_KEY_RUN_IDS),
    ({STATE_KEY_RUN_IDS: None}, STATE_KEY_RUN_IDS),
    ({STATE_KEY_RUN_IDS: ["run-a"], STATE_KEY_LATEST_STEP: -1}, STATE_KEY_LATEST_STEP),
    ({STATE_KEY_RUN_IDS: ["run-a"], STATE_KEY_LATEST_STEP: "3"}, STATE_KEY_LATEST_STEP),
    ({STATE_KEY_RUN_IDS: ["run-a"], STATE_KEY_LATEST_STEP: True}, STATE_KEY_LATEST_STEP),
    ({STATE_KEY_RUN_IDS: ["run-a"], STATE_KEY_LATEST_STEP: 2.5}, STATE_KEY_LATEST_STEP),
    ({STATE_KEY_LATEST_STEP: [1]}, STATE_KEY_LATEST_STEP),
]


@pytest.mark.parametrize(("state", "key"), MALFORMED)
def test_a_malformed_key_is_refused_naming_file_and_key_before_anything_is_written(
    tmp_path: Path, state: Any, key: str
) -> None:
    folder = model_dir(tmp_path)
    path = folder / "state.json"
    path.write_text(json.dumps(state))
    fake = FakeTinker()
    with pytest.raises(CorruptDataError) as caught:
        register(tmp_path, fake)
    assert str(path) in str(caught.value) and repr(key) in str(caught.value)
    assert fake.runs == 0 and fake.sent == []  # nothing asked of the service
    assert sorted(p.name for p in folder.iterdir()) == ["state.json"]
    assert path.read_text() == json.dumps(state)


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '"tinker"'])
def test_a_state_file_that_is_not_a_json_object_is_refused(tmp_path: Path, text: str) -> None:
    path = model_dir(tmp_path) / "state.json"
    path.write_text(text)
    with pytest.raises(CorruptDataError, match=r"state\.json is not"):
        read_art_state(path.parent)


def test_no_state_or_no_run_ids_is_nothing_to_adopt(tmp_path: Path) -> None:
    folder = model_dir(tmp_path)
    assert read_art_state(folder) is None
    (folder / "state.json").write_text(json.dumps({"dataset_offset": 3, "latest_step": 4}))
    assert read_art_state(folder) is None
    (folder / "state.json").write_text(json.dumps({"tinker_run_ids": ["a", "b:train:0"]}))
    found = read_art_state(folder)
    assert found is not None and found.run_ids == ("a", "b:train:0")
    assert found.latest_step is None


def test_a_run_without_a_training_checkpoint_starts_over_at_step_zero_like_arts(
    tmp_path: Path,
) -> None:
    """ART saves a training checkpoint only with save_checkpoint=True; without one ART's own
    backend starts a new run at step 0, and so does arthex (ART's state.json untouched)."""
    path = model_dir(tmp_path) / "state.json"
    state = {STATE_KEY_RUN_IDS: ["art-run"], STATE_KEY_LATEST_STEP: 3, "other": {"x": 1}}
    path.write_text(json.dumps(state, indent=2))
    fake = FakeTinker()
    fake.checkpoints["art-run"] = {
        f"tinker://art-run/sampler_weights/step_{n:06d}" for n in range(4)
    }
    assert register(tmp_path, fake) == 0
    record = json.loads((path.parent / "tinker-run.json").read_text())
    assert record["step"] == 0 and record["training_run_id"] == "run-1"
    assert path.read_text() == json.dumps(state, indent=2)


def listed(run: str, kind: str, name: str) -> Listed:
    segment = "weights" if kind == "training" else "sampler_weights"
    return Listed(f"{segment}/{name}", kind, f"tinker://{run}/{segment}/{name}")


def test_checkpoints_are_found_as_art_finds_them() -> None:
    first = [
        listed("a", "training", "step_000002"),
        listed("a", "sampler", "step_000002"),
        listed("a", "training", "step_000004"),
        listed("a", "sampler", "step_000005"),
        listed("a", "training", "before"),  # not a step: ignored, as ART ignores it
        listed("a", "sampler", "step_7"),  # any width of digits is a step, as in ART's pattern
    ]
    second = [listed("b", "training", "step_000004"), listed("b", "sampler", "step_000004")]
    training, sampler = art_checkpoints([("a", first), ("b", second)])
    assert training == {
        2: "tinker://a/weights/step_000002",
        4: "tinker://b/weights/step_000004",  # the later run id wins
    }
    assert sampler == {
        2: "tinker://a/sampler_weights/step_000002",
        4: "tinker://b/sampler_weights/step_000004",
        5: "tinker://a/sampler_weights/step_000005",
        7: "tinker://a/sampler_weights/step_7",
    }
    record = adopted_record(training, sampler, base_model="m", lora_rank=1, training_run_id="b")
    assert record.step == 4  # the newest training checkpoint; later sampler-only steps stay out
    assert record.checkpoints == (
        Checkpoint(2, sampler[2], training[2]),
        Checkpoint(4, sampler[4], training[4]),
    )


INFO = (
    "model_id: run-a\n"
    "sampler_weights_path: tinker://run-a/sampler_weights/{name}\n"
    "state_with_optimizer_path: tinker://run-a/weights/{name}\n"
)  # what yaml.safe_dump writes for ART's TinkerService._save_checkpoint


def test_arts_tinker_backend_folders_are_read_by_step(tmp_path: Path) -> None:
    folder = model_dir(tmp_path)
    assert read_art_checkpoint_folders(folder) is None
    (folder / "checkpoints" / "0003").mkdir(parents=True)  # a LocalBackend's: no info.yaml
    assert read_art_checkpoint_folders(folder) is None
    for name in ("0000", "0010"):
        (folder / "checkpoints" / name).mkdir(exist_ok=True)
        (folder / "checkpoints" / name / "info.yaml").write_text(INFO.format(name=name))
    found = read_art_checkpoint_folders(folder)
    assert found == (
        {0: "tinker://run-a/weights/0000", 10: "tinker://run-a/weights/0010"},
        {0: "tinker://run-a/sampler_weights/0000", 10: "tinker://run-a/sampler_weights/0010"},
    )


BAD_INFO: list[tuple[str, str]] = [
    ("model_id: run-a\n", "'state_with_optimizer_path'"),
    (INFO.format(name="0001").replace("tinker://run-a/weights", "s3://b/w"), "'state_with"),
    (INFO.format(name="0001").replace("tinker://run-a/sampler", "tinker:///sampler"), "'sampler"),
    ("- a\n- b\n", "is not a YAML mapping"),
    ("key: [unclosed\n", "is not ART's checkpoint info"),
]


@pytest.mark.parametrize(("text", "named"), BAD_INFO)
def test_a_malformed_info_yaml_is_refused_naming_it_before_anything_is_written(
    tmp_path: Path, text: str, named: str
) -> None:
    folder = model_dir(tmp_path)
    info = folder / "checkpoints" / "0001" / "info.yaml"
    info.parent.mkdir(parents=True)
    info.write_text(text)
    fake = FakeTinker()
    with pytest.raises(CorruptDataError) as caught:
        register(tmp_path, fake)
    assert str(info) in str(caught.value) and named in str(caught.value)
    assert fake.runs == 0 and fake.sent == []
    assert sorted(p.name for p in folder.iterdir()) == ["checkpoints"]
    assert info.read_text() == text
