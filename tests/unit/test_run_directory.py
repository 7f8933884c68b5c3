"""A run lives in one directory, the model's `base_path`: a backend's `path` (ART's spelling of
that place) may only agree with it. Real folders in tmp_path; nothing is trained."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import arthex as art
from arthex.adapters.layout import backend_run_dir
from arthex.adapters.run_files.lease import FileRunLeases
from arthex.adapters.tinker.backend import TinkerBackend
from arthex.core.errors import InvalidInputError
from arthex.core.identity import ModelSpec, RunRef

RUN = RunRef(project="proj", name="agent")


def test_a_backend_path_naming_another_place_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    logs, elsewhere = tmp_path / "logs", tmp_path / "elsewhere"

    async def main() -> None:
        model = art.TrainableModel(
            name="agent", project="proj", base_model="tiny", base_path=str(logs), report_metrics=[]
        )
        backend = art.LocalBackend(path=str(elsewhere), engine="torch", device="cpu")
        try:
            with pytest.raises(InvalidInputError) as refused:
                await model.register(backend)
        finally:
            await model.close()
            await backend.close()
        message = str(refused.value)
        assert "LocalBackend(path=" in message and "names another place for proj/agent" in message
        assert f"pass base_path={str(elsewhere)!r} to the model" in message
        assert "\n" not in message

    asyncio.run(main())
    assert not elsewhere.exists()
    assert not (logs / "proj" / "models" / "agent" / "model.json").exists()
    FileRunLeases(str(logs)).acquire_now(RUN).release_now()  # the model gave its lease back


def test_the_tinker_backend_keeps_the_same_rule(tmp_path: Path) -> None:
    backend = TinkerBackend(path=str(tmp_path / "elsewhere"), serve=False)
    spec = ModelSpec(run=RUN, base_model="tiny-base", base_path=str(tmp_path / "logs"))
    with pytest.raises(InvalidInputError, match=r"TinkerBackend\(path=.*names another place"):
        asyncio.run(backend.register(spec))
    assert not (tmp_path / "elsewhere").exists()


def test_a_path_spelled_otherwise_but_naming_the_base_path_agrees(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    spec = ModelSpec(run=RUN, base_model="tiny", base_path=str(tmp_path / "runs"))
    expected = tmp_path / "runs" / "proj" / "models" / "agent"
    assert backend_run_dir(spec, "runs/", "LocalBackend") == expected
    assert backend_run_dir(spec, None, "LocalBackend") == expected
