"""ART's doors into the wandb SDK (`arthex.art.utils.wandb_sdk`) and its provenance helper
(`arthex.art.utils.record_provenance`) on the real wandb SDK in offline mode: a run started and
an artifact logged through them, read back from the offline run's own files."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from arthex.art.utils import record_provenance as provenance_from_utils
from arthex.art.utils import wandb_sdk
from arthex.art.utils.record_provenance import record_provenance
from arthex.core.errors import InvalidInputError
from arthex.testing.wandb_offline import offline_run_dirs, read_offline_run, sandbox_environment
from arthex.utils.record_provenance import record_on

wandb = pytest.importorskip("wandb")

pytestmark = pytest.mark.e2e


@pytest.fixture
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    sandbox_environment(monkeypatch, tmp_path / "wandb-home")
    for name in ("WANDB_API_KEY", "WANDB_ENTITY"):
        monkeypatch.delenv(name, raising=False)
    yield
    wandb.teardown()


def test_the_doors_are_the_sdks_own_calls(offline: None, tmp_path: Path) -> None:
    assert wandb_sdk.comm_error_type() is wandb.errors.CommError
    assert wandb_sdk.login() is False  # offline: no key is checked, none is stored
    settings = wandb_sdk.settings(console="off")
    assert isinstance(settings, wandb.Settings) and settings.console == "off"
    run = wandb_sdk.init(
        project="bench", name="agent-7", dir=str(tmp_path), config={"lr": 1e-5}, settings=settings
    )
    try:
        assert run.offline and run.name == "agent-7"
        adapter = tmp_path / "adapter_config.json"
        adapter.write_text('{"r": 8}')
        artifact = wandb_sdk.artifact(
            "agent-7", type="lora", metadata={"wandb.provenance": ["local-rl"]}
        )
        assert isinstance(artifact, wandb.Artifact)
        record_on(artifact, "serverless-rl")
        record_on(artifact, "serverless-rl")  # already the last entry: not twice
        artifact.add_file(str(adapter), name="adapter_config.json")
        run.log_artifact(artifact, aliases=["step3", "latest"])
        run.log({"val/reward": 0.5}, step=3)
        # an offline run has no W&B server to fetch its artifacts from: refused at once
        with pytest.raises(InvalidInputError, match=r"W&B run 'agent-7' is offline"):
            record_provenance(run, "local-sft")
    finally:
        run.finish()
    (run_dir,) = offline_run_dirs(tmp_path)
    logged = read_offline_run(run_dir, wait=10.0)
    assert logged.finished and logged.display_name == "agent-7" and logged.project == "bench"
    assert logged.config["lr"] == 1e-5
    assert [row["val/reward"] for row in logged.history] == [0.5]
    (staged,) = logged.artifacts
    assert (staged.name, staged.type) == ("agent-7", "lora")
    assert sorted(staged.aliases) == ["latest", "step3"]
    assert staged.metadata == {"wandb.provenance": ["local-rl", "serverless-rl"]}
    assert [file.path for file in staged.files] == ["adapter_config.json"]
    assert provenance_from_utils is record_provenance
