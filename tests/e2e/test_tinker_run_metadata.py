"""A training run keeps the `user_metadata` its client was created with, and the SDK reads it
back from the run (by id, or by the path of one of its checkpoints), also after a restart of
the service: tinker-cookbook's recipes keep their renderer's name there and check it when
they resume or load a checkpoint. Metadata that is not strings to strings is refused."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("tinker")
pytest.importorskip("torch")

from arthex.emulators.tinker import TinkerEmulator

pytestmark = pytest.mark.e2e

KEY = "tml-run-metadata"
TIMEOUT_S = 120.0
META = {"renderer_name": "role_colon", "wandb_link": "https://example.invalid/run/1"}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    from arthex.testing.tiny_model import tiny_model

    return tiny_model(tmp_path_factory.getbasetemp() / "tiny-model")


@pytest.fixture(autouse=True)
def _no_telemetry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TINKER_TELEMETRY", "0")


def emulator_on(tiny: str, state: Path) -> TinkerEmulator:
    return TinkerEmulator(tiny, api_key=KEY, state_dir=str(state), torch_threads=1)


def run_metadata(base_url: str, *, run_id: str | None = None, path: str | None = None) -> object:
    import tinker

    rest = tinker.RestClient(base_url=base_url, api_key=KEY)
    if run_id is not None:
        return rest.get_training_run(run_id).result(TIMEOUT_S).user_metadata
    assert path is not None
    return rest.get_training_run_by_tinker_path(path).result(TIMEOUT_S).user_metadata


@pytest.fixture
def saved(tiny: str, tmp_path: Path) -> Iterator[tuple[TinkerEmulator, str]]:
    """An emulator on `tmp_path/state`, and the saved state of a run created with META."""
    import tinker

    with emulator_on(tiny, tmp_path / "state") as emulator:
        service = tinker.ServiceClient(base_url=emulator.base_url, api_key=KEY)
        try:
            trainer = service.create_lora_training_client(
                base_model=tiny, rank=4, user_metadata=META
            ).result(TIMEOUT_S)
            path = trainer.save_state("first").result(TIMEOUT_S).path
        finally:
            service.close("success").result(TIMEOUT_S)
        yield emulator, path


def test_a_run_reads_back_its_metadata_by_id_and_by_checkpoint(
    saved: tuple[TinkerEmulator, str],
) -> None:
    emulator, path = saved
    run_id = path.removeprefix("tinker://").split("/", 1)[0]
    assert run_metadata(emulator.base_url, run_id=run_id) == META
    assert run_metadata(emulator.base_url, path=path) == META


def test_a_run_created_from_a_state_has_its_own_metadata(
    saved: tuple[TinkerEmulator, str],
) -> None:
    import tinker

    emulator, path = saved
    service = tinker.ServiceClient(base_url=emulator.base_url, api_key=KEY)
    try:
        loaded = service.create_training_client_from_state(
            path, user_metadata={"renderer_name": "llama3"}
        ).result(TIMEOUT_S)
        second = loaded.save_state("second").result(TIMEOUT_S).path
        plain = service.create_training_client_from_state(path).result(TIMEOUT_S)
        third = plain.save_state("third").result(TIMEOUT_S).path
    finally:
        service.close("success").result(TIMEOUT_S)
    assert run_metadata(emulator.base_url, path=second) == {"renderer_name": "llama3"}
    assert run_metadata(emulator.base_url, path=third) is None
    assert run_metadata(emulator.base_url, path=path) == META  # the source run is unchanged


def test_the_metadata_outlives_a_restart(
    saved: tuple[TinkerEmulator, str], tiny: str, tmp_path: Path
) -> None:
    emulator, path = saved
    emulator.stop()
    with emulator_on(tiny, tmp_path / "state") as restarted:
        assert run_metadata(restarted.base_url, path=path) == META


def test_metadata_that_is_not_strings_is_refused(tiny: str, tmp_path: Path) -> None:
    import tinker

    with emulator_on(tiny, tmp_path / "state") as emulator:
        service = tinker.ServiceClient(base_url=emulator.base_url, api_key=KEY)
        try:
            with pytest.raises(tinker.BadRequestError, match="user_metadata must map strings"):
                service.create_lora_training_client(
                    base_model=tiny,
                    rank=4,
                    user_metadata={"steps": 3},  # type: ignore[dict-item]
                ).result(TIMEOUT_S)
        finally:
            service.close("success").result(TIMEOUT_S)
        assert not list((tmp_path / "state").glob("runs/*"))  # refused before anything written
