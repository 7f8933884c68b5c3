"""Two of ART 0.5.23's documented training loops, changed only in their import lines, base
model and sizes (see tests/e2e/art_loops/), train the tiny model on CPU with arthex's
LocalBackend and leave a two-step run in ART's layout."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

import pyarrow.parquet as pq

from arthex.core.training_row import GRADIENT_STEPS_KEY
from arthex.testing.tiny_model import tiny_model

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def base_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    return tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture
def no_wandb(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for key in ("WANDB_API_KEY", "WANDB_MODE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))


def history(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]


def trained_choices(table: Any) -> list[dict[str, Any]]:
    choices = []
    for dump in table.column("trajectory_json").to_pylist():
        for item in json.loads(dump)["messages_and_choices"]:
            if "finish_reason" in item:
                choices.append(item)
    return choices


def assert_two_step_art_run(run_dir: Path) -> list[dict[str, Any]]:
    """What ART's tools look for: model.json, history rows with `step`, `training_step` and
    `recorded_at`, one training row per update, and `trajectories/train/NNNN.parquet` (v2)
    at the step each batch produced, with checkpoint folders `checkpoints/NNNN`."""
    assert (run_dir / "model.json").is_file()
    rows = history(run_dir)
    assert all({"step", "training_step", "recorded_at"} <= row.keys() for row in rows)
    assert all(row["training_step"] == row["step"] for row in rows)
    assert [row["step"] for row in rows if GRADIENT_STEPS_KEY in row] == [1, 2]
    train_dir = run_dir / "trajectories" / "train"
    # the data files ART reads; a hidden `.lock` beside them serializes writers of a step
    visible = sorted(p.name for p in train_dir.iterdir() if not p.name.startswith("."))
    assert visible == ["0001.parquet", "0002.parquet"]
    for part in train_dir.glob("*.parquet"):
        table = pq.read_table(part)
        assert table.schema.metadata[b"art.trajectory_parquet.version"] == b"2"
        # the rollouts never asked for logprobs; the server sent them, and training used them
        choices = trained_choices(table)
        assert choices and all(c["logprobs"] and c["logprobs"]["content"] for c in choices)
    assert (run_dir / "checkpoints" / "0002").is_dir()
    return rows


def test_the_art_docs_client_loop_runs_with_its_imports_changed(
    base_model: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    no_wandb: None,
) -> None:
    from tests.e2e.art_loops import docs_client_loop

    monkeypatch.chdir(tmp_path)  # the page's LocalBackend() and model use ./.art
    asyncio.run(docs_client_loop.main(base_model))
    out = capsys.readouterr().out
    assert out.count("num train groups: 2") == 2
    assert out.count("length of each train group: 3") == 2
    run_dir = tmp_path / ".art" / "my-agentic-task" / "models" / "agent-001"
    rows = assert_two_step_art_run(run_dir)
    summaries = [row for row in rows if "train/reward" in row]
    assert [row["step"] for row in summaries] == [1, 2]  # logged with result.step, as in ART
    for part in ("0001", "0002"):
        assert pq.read_table(run_dir / f"trajectories/train/{part}.parquet").num_rows == 2 * 3


def test_the_art_skill_template_loop_runs_with_its_imports_changed(
    base_model: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], no_wandb: None
) -> None:
    from tests.e2e.art_loops import skill_minimal_loop

    base_path = str(tmp_path / ".art")
    served = asyncio.run(skill_minimal_loop.main(base_model, base_path))
    assert served == "digits@2"  # served under its name, stored under its run_name (ART 0.5.23)
    assert "final model: digits@2" in capsys.readouterr().out
    run_dir = tmp_path / ".art" / "skill-template" / "models" / "digits-run-1"
    rows = assert_two_step_art_run(run_dir)
    # the judge's scores replaced the rewards, and its metrics were kept
    train_rows = [row for row in rows if "train/ruler_score" in row]
    assert [row["step"] for row in train_rows] == [1, 2]
    assert all(row["train/reward"] == pytest.approx(row["train/ruler_score"]) for row in train_rows)
    val_rows = [row for row in rows if "val/reward" in row]
    assert [row["step"] for row in val_rows] == [1, 2]
    val_dir = run_dir / "trajectories" / "val"
    assert sorted(p.name for p in val_dir.iterdir() if not p.name.startswith(".")) == [
        "0001.parquet",
        "0002.parquet",
    ]
    # delete_checkpoints kept the latest and the best validation step, nothing else
    best = max(val_rows, key=lambda row: (row["val/reward"], row["step"]))["step"]
    kept = sorted(int(p.name) for p in (run_dir / "checkpoints").iterdir() if p.name.isdigit())
    assert kept == sorted({2, best})


def test_register_fills_arts_inference_fields_and_train_names_the_checkpoint(
    base_model: str, tmp_path: Path, no_wandb: None
) -> None:
    """ART's inference fields after register; then `backend.train` returns ART's
    LocalTrainResult naming the new step's checkpoint folder, whole when it returns (ART's
    rule: `{path}/{project}/models/{run_name}/checkpoints/{step:04d}`, if it exists)."""
    import arthex as art
    import arthex.art as art_names

    run_dir = tmp_path / "logs" / "fields" / "models" / "agent-run-1"

    async def main() -> None:
        model = art.TrainableModel(
            name="agent",
            run_name="agent-run-1",
            project="fields",
            base_model=base_model,
            base_path=str(tmp_path / "logs"),
            report_metrics=[],
        )
        assert (model.inference_base_url, model.inference_model_name) == (None, None)
        backend = art.LocalBackend(path=str(tmp_path / "logs"))  # ART's spelling, agreeing
        await model.register(backend)
        try:
            assert model.inference_base_url is not None
            assert model.inference_base_url.startswith("http://127.0.0.1:")
            assert model.inference_api_key
            assert model.inference_model_name == model.get_inference_name() == "agent@0"
            client = model.openai_client()
            assert str(client.base_url).rstrip("/") == model.inference_base_url.rstrip("/")
            reply = await client.chat.completions.create(
                model=model.inference_model_name,
                messages=[{"role": "user", "content": "hi"}],
                max_tokens=3,
            )
            assert reply.choices[0].logprobs is not None  # never asked for, sent anyway
            prompt = [{"role": "user", "content": "hi"}]
            group = art.TrajectoryGroup(
                [
                    art.Trajectory(messages_and_choices=[*prompt, reply.choices[0]], reward=r)
                    for r in (0.0, 1.0)
                ]
            )
            result = await backend.train(model, [group], learning_rate=1e-4)
            assert isinstance(result, art_names.LocalTrainResult)
            assert isinstance(result, art.TrainResult) and result.step == 1
            assert result.checkpoint_path == str(run_dir / "checkpoints" / "0001")
            assert result.checkpoint_ready is None
            whole = sorted(
                p.name
                for p in await asyncio.to_thread(run_dir.joinpath("checkpoints", "0001").iterdir)
            )
            assert whole, "the checkpoint is written when train returns"
            again = await model.train([group])  # arthex's own call keeps its plain result
            assert type(again) is art.TrainResult and again.step == 2
        finally:
            await model.close()
            await backend.close()

    asyncio.run(main())
    assert (run_dir / "checkpoints").is_dir() and (run_dir / "trainer.lease").is_file()
