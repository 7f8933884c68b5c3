"""A trained step's LoRA adapter deployed with `arthex.art.utils.deployment` (ART 0.5.23's
functions), to the real things or their loopback stand-ins:

- Together: a server on loopback implementing the model-upload endpoints ART's client calls
  (tests/_together_server.py: GET /v1/jobs, GET /v1/jobs/{id}, POST /v1/models, which fetches
  the presigned URL as Together does), and moto's S3 server, reached through the AWS
  environment, for the archive Together downloads;
- W&B: the real wandb SDK in offline mode; the artifact is read back from the run's
  transaction log and its staged files.

The oracles: the physical checkpoint files (every byte of the archive Together fetched, every
staged artifact file and its MD5), ART's request shapes and names as its code writes them, and
for bad input, that nothing reached either server and nothing was written.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import json
import secrets
import zipfile
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import arthex
from arthex.adapters.local.checkpoints import publish
from arthex.art.errors import (
    LoRADeploymentTimedOutError,
    UnsupportedBaseModelDeploymentError,
    UnsupportedLoRADeploymentProviderError,
)
from arthex.art.utils.deployment import (
    DeploymentResult,
    TogetherDeploymentConfig,
    WandbDeploymentConfig,
    deploy_model,
    deploy_wandb,
)
from arthex.art.utils.deployment.together import deploy_to_together
from arthex.art.utils.output_dirs import get_model_dir, get_step_checkpoint_dir
from arthex.core.errors import BackendError, InvalidInputError
from arthex.testing.wandb_offline import offline_run_dirs, read_offline_run, sandbox_environment
from tests._s3_server import BUCKET, S3
from tests._together_server import API_KEY, USER, Together

pytestmark = pytest.mark.e2e

PROJECT, RUN = "deploy-proj", "agent-7"
TOGETHER_BASE = "Qwen/Qwen2.5-14B-Instruct"  # served by both providers
WANDB_BASE = "OpenPipe/Qwen3-14B-Instruct"
POLL, WAIT = 0.01, 5.0  # seconds: a loopback job moves on at each look


# -- checkpoints, as arthex and ART write them -------------------------------------------------


def adapter_files(seed: int) -> dict[str, bytes]:
    """A PEFT LoRA adapter (rank 4, q/v projections of two layers) in safetensors."""
    import numpy as np
    from safetensors.numpy import save as save_tensors

    random = np.random.default_rng(seed)
    tensors = {
        f"base_model.model.model.layers.{layer}.self_attn.{proj}.lora_{ab}.weight": random.normal(
            size=(4, 64) if ab == "A" else (64, 4)
        ).astype(np.float32)
        for layer in range(2)
        for proj in ("q_proj", "v_proj")
        for ab in ("A", "B")
    }
    config = {
        "peft_type": "LORA",
        "base_model_name_or_path": TOGETHER_BASE,
        "r": 4,
        "lora_alpha": 8,
        "target_modules": ["q_proj", "v_proj"],
        "task_type": "CAUSAL_LM",
    }
    return {
        "adapter_model.safetensors": save_tensors(tensors),
        "adapter_config.json": json.dumps(config, indent=2).encode(),
    }


def arthex_checkpoint(base_path: Path, step: int) -> Path:
    """A LoRA step as arthex's LocalBackend publishes it: the adapter, the optimizer state and
    the state file, renamed into place."""
    run = base_path / PROJECT / "models" / RUN

    def write(folder: Path) -> None:
        for name, data in adapter_files(step).items():
            (folder / name).write_bytes(data)
        (folder / "optimizer.safetensors").write_bytes(secrets.token_bytes(4096))
        (folder / "optimizer.json").write_text(json.dumps({"step": step}))

    return publish(run, step, write, {"train_metrics": {"loss": 0.5}})


def art_checkpoint(base_path: Path, step: int) -> Path:
    """A step as ART's LocalBackend leaves it: the adapter files (and what else peft saved)."""
    folder = base_path / PROJECT / "models" / RUN / "checkpoints" / f"{step:04d}"
    folder.mkdir(parents=True)
    for name, data in adapter_files(step).items():
        (folder / name).write_bytes(data)
    (folder / "README.md").write_text("# adapter\n")
    return folder


def files_of(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }


def model(base_path: Path, base_model: str = TOGETHER_BASE, **kwargs: Any) -> Any:
    return arthex.TrainableModel(
        name=RUN, project=PROJECT, base_model=base_model, base_path=str(base_path),
        report_metrics=[], **kwargs,
    )  # fmt: skip


# -- Together --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def s3_server() -> Iterator[S3]:
    made = S3()
    yield made
    made.stop()


@pytest.fixture
def s3(s3_server: S3, monkeypatch: pytest.MonkeyPatch) -> S3:
    s3_server.use_from_environment(monkeypatch)
    return s3_server


@pytest.fixture
def together(s3: S3, monkeypatch: pytest.MonkeyPatch) -> Iterator[Together]:
    server = Together()
    monkeypatch.setenv("TOGETHER_BASE_URL", server.base)
    monkeypatch.setenv("TOGETHER_API_KEY", API_KEY)
    yield server
    server.stop()


def deploy(trained: Any, folder: Path, step: int, config: TogetherDeploymentConfig) -> str:
    return asyncio.run(
        deploy_to_together(trained, str(folder), step, config, poll_seconds=POLL, wait_seconds=WAIT)
    )


def zipped(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def calls(server: Together) -> list[tuple[str, str]]:
    return [(r.method, r.path) for r in server.requests]


def test_an_arthex_step_deploys_to_together_through_s3(
    together: Together, s3: S3, tmp_path: Path
) -> None:
    folder = arthex_checkpoint(tmp_path, 3)
    trained = model(tmp_path)
    assert Path(get_step_checkpoint_dir(get_model_dir(trained), 3)) == folder
    prefix = f"team-{secrets.token_hex(4)}"
    config = TogetherDeploymentConfig(s3_bucket=BUCKET, prefix=prefix)
    name = asyncio.run(
        deploy_to_together(trained, str(folder), 3, config, poll_seconds=POLL, wait_seconds=WAIT)
    )

    assert name == f"{USER}/{PROJECT}-{RUN}-3"
    (job_id,) = together.jobs
    assert calls(together) == [
        ("GET", "/v1/jobs"),
        ("POST", "/v1/models"),
        *[("GET", f"/v1/jobs/{job_id}")] * 3,  # Queued, Running, Complete
    ]
    for request in together.requests:
        assert request.authorization == f"Bearer {API_KEY}"
        assert request.content_type == "application/json"
    upload = together.requests[1].body
    key = f"{prefix}/{PROJECT}/models/{RUN}/zipped-steps/0003.zip"
    assert upload == {
        "model_name": f"{PROJECT}-{RUN}-3",
        "model_source": upload["model_source"],
        "model_type": "adapter",
        "base_model": TOGETHER_BASE,
        "description": f"Deployed from ART. Project: {PROJECT}. Run: {RUN}. Step: 3",
    }
    assert f"/{BUCKET}/{key}?" in upload["model_source"]
    assert "Signature=" in upload["model_source"]  # presigned: Together holds no credentials
    # what Together fetched is the adapter, byte for byte: no optimizer or trainer state
    fetched = zipped(together.fetched[f"{PROJECT}-{RUN}-3"])
    physical = files_of(folder)
    assert set(physical) == {
        "adapter_config.json", "adapter_model.safetensors", "optimizer.json",
        "optimizer.safetensors", "trainer_state.json",
    }  # fmt: skip
    assert fetched == {n: physical[n] for n in ("adapter_config.json", "adapter_model.safetensors")}
    assert s3.keys(f"{BUCKET}/{prefix}") == [f"{PROJECT}/models/{RUN}/zipped-steps/0003.zip"]


def test_an_art_step_is_sent_whole_and_deploy_model_returns_the_name(
    together: Together,
    s3: S3,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    together.statuses = [("Complete", "Model upload complete")]
    folder = art_checkpoint(tmp_path, 12)
    monkeypatch.setenv("BACKUP_BUCKET", BUCKET)  # the bucket when the config names none
    config = TogetherDeploymentConfig()
    deploying = deploy_model(model(tmp_path), str(folder), 12, "together", config, verbose=True)
    result = asyncio.run(deploying)
    assert result == DeploymentResult(inference_model_name=f"{USER}/{PROJECT}-{RUN}-12")
    said = capsys.readouterr().out  # ART's verbose lines
    assert "presigned_url http://" in said and "Successfully uploaded to Together: {" in said
    assert '"status": "Complete"' in said
    assert zipped(together.fetched[f"{PROJECT}-{RUN}-12"]) == files_of(folder)
    assert len(files_of(folder)) == 3


def test_a_deployed_step_is_not_uploaded_again_and_another_steps_job_is_not_taken(
    together: Together, s3: S3, tmp_path: Path
) -> None:
    done = together.add_job(f"{PROJECT}-{RUN}-1", [("Complete", "Model upload complete")])
    # ART matches any job whose name contains "{project}-{run}-{step}": step 1 finds step 12
    together.add_job(f"{PROJECT}-{RUN}-12", [("Complete", "done")], age=timedelta(seconds=-5))
    prefix = f"again-{secrets.token_hex(4)}"
    config = TogetherDeploymentConfig(s3_bucket=BUCKET, prefix=prefix)
    name = deploy(model(tmp_path), arthex_checkpoint(tmp_path, 1), 1, config)
    assert name == done.model_name
    assert calls(together) == [
        ("GET", "/v1/jobs"), ("GET", f"/v1/jobs/{done.job_id}"), ("GET", f"/v1/jobs/{done.job_id}")
    ]  # fmt: skip
    assert s3.keys(f"{BUCKET}/{prefix}") == []  # nothing uploaded for a step already there

    step2 = arthex_checkpoint(tmp_path, 2)
    together.requests.clear()
    name = asyncio.run(
        deploy_to_together(
            model(tmp_path), str(step2), 2, config, poll_seconds=POLL, wait_seconds=WAIT
        )
    )
    assert name == f"{USER}/{PROJECT}-{RUN}-2"
    assert ("POST", "/v1/models") in calls(together)


def test_a_failed_job_is_uploaded_again_and_a_failure_names_togethers_reason(
    together: Together, s3: S3, tmp_path: Path
) -> None:
    old = together.add_job(f"{PROJECT}-{RUN}-4", [("Error", "bad archive")])
    together.statuses = [("Queued", "queued"), ("Bad", "adapter_config.json: unknown base model")]
    config = TogetherDeploymentConfig(s3_bucket=BUCKET, prefix="failing")
    with pytest.raises(RuntimeError) as failed:
        deploy(model(tmp_path), arthex_checkpoint(tmp_path, 4), 4, config)
    new = next(job for job in together.jobs if job != old.job_id)
    assert str(failed.value) == (
        f"Together deployment failed for {RUN} step 4. Job ID: {new}. "
        "Reason: adapter_config.json: unknown base model"
    )
    assert calls(together)[:3] == [
        ("GET", "/v1/jobs"), ("GET", f"/v1/jobs/{old.job_id}"), ("POST", "/v1/models")
    ]  # fmt: skip


def test_a_model_together_already_holds_counts_as_deployed(
    together: Together, s3: S3, tmp_path: Path
) -> None:
    conflict = "409 Client Error: Conflict for url: https://api.together.ai/api/admin/entity/Model"
    together.statuses = [("Retry Queued", "retrying"), ("Error", f"upload failed: {conflict}")]
    config = TogetherDeploymentConfig(s3_bucket=BUCKET, prefix="conflict")
    name = deploy(model(tmp_path), arthex_checkpoint(tmp_path, 5), 5, config)
    assert name == f"{USER}/{PROJECT}-{RUN}-5"


def test_a_job_that_never_finishes_times_out_and_one_not_waited_for_returns_at_once(
    together: Together, s3: S3, tmp_path: Path
) -> None:
    together.statuses = [("Queued", "queued"), ("Running", "still going")]
    folder = str(arthex_checkpoint(tmp_path, 6))
    config = TogetherDeploymentConfig(s3_bucket=BUCKET, prefix="slow")
    with pytest.raises(
        LoRADeploymentTimedOutError, match=r"timed out after 0\.2 seconds\. Job ID: job-"
    ) as late:
        asyncio.run(deploy_to_together(model(tmp_path), folder, 6, config, poll_seconds=0.02,
                                       wait_seconds=0.2))  # fmt: skip
    assert late.value.status_code == 504
    together.requests.clear()
    config = TogetherDeploymentConfig(s3_bucket=BUCKET, prefix="slow", wait_for_completion=False)
    name = asyncio.run(deploy_to_together(model(tmp_path), folder, 6, config))
    assert name == f"{USER}/{PROJECT}-{RUN}-6"  # still running: found, not sent again, no wait
    (job_id,) = together.jobs
    assert calls(together) == [("GET", "/v1/jobs"), *[("GET", f"/v1/jobs/{job_id}")] * 2]


def test_polls_together_does_not_answer_are_asked_again_until_the_deadline(
    together: Together, s3: S3, tmp_path: Path
) -> None:
    folder = str(arthex_checkpoint(tmp_path, 8))
    config = TogetherDeploymentConfig(s3_bucket=BUCKET, prefix="busy")
    together.unavailable = 2
    name = asyncio.run(deploy_to_together(model(tmp_path), folder, 8, config, poll_seconds=0.02,
                                          wait_seconds=WAIT))  # fmt: skip
    assert name == f"{USER}/{PROJECT}-{RUN}-8"
    (job_id,) = together.jobs
    assert calls(together).count(("GET", f"/v1/jobs/{job_id}")) == 2 + 3  # 2 unanswered
    together.reset()
    together.unavailable = 10**6
    with pytest.raises(LoRADeploymentTimedOutError, match=r"the last poll: \[HTTP 503\]"):
        asyncio.run(deploy_to_together(model(tmp_path), folder, 8, config, poll_seconds=0.02,
                                       wait_seconds=0.2))  # fmt: skip


def test_a_refused_key_is_one_line_naming_the_status(
    together: Together, s3: S3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOGETHER_API_KEY", "wrong")
    config = TogetherDeploymentConfig(s3_bucket=BUCKET, prefix="refused")
    with pytest.raises(
        BackendError, match=r"^\[HTTP 401\] GET http://127\.0\.0\.1:\d+/v1/jobs: .*Invalid API key"
    ):
        deploy(model(tmp_path), arthex_checkpoint(tmp_path, 1), 1, config)
    assert s3.keys(f"{BUCKET}/refused") == []


BAD_TOGETHER: list[tuple[str, dict[str, Any], type[Exception], str]] = [
    ("base model", {"base_model": "meta-llama/Llama-3.1-8B-Instruct"},
     UnsupportedBaseModelDeploymentError, "not supported for serverless LoRA deployment by Togeth"),
    ("no key", {"env": {"TOGETHER_API_KEY": None}}, ValueError, "TOGETHER_API_KEY is not set"),
    ("no bucket", {"config": TogetherDeploymentConfig()}, InvalidInputError, "no S3 bucket given"),
    ("bad bucket", {"config": TogetherDeploymentConfig(s3_bucket="s3://b/x")}, InvalidInputError,
     "is not a bucket name"),
    ("bad prefix", {"config": TogetherDeploymentConfig(s3_bucket=BUCKET, prefix="a/../b")},
     InvalidInputError, "prefix segment"),
    ("step", {"step": -1}, InvalidInputError, "step must be an integer >= 0"),
    ("no folder", {"folder": "missing"}, FileNotFoundError, "Checkpoint not found at"),
    ("not a lora", {"folder": "full"}, InvalidInputError, "holds no LoRA adapter"),
    ("no config", {"config": None}, ValueError, "Config is required for provider 'together'"),
    ("wrong config", {"config": WandbDeploymentConfig(provenance=[])}, TypeError,
     "Expected TogetherDeploymentConfig for provider 'together', got WandbDeploymentConfig"),
    ("provider", {"provider": "fireworks"}, UnsupportedLoRADeploymentProviderError,
     "Unsupported provider: fireworks. Use 'together' or 'wandb'."),
]  # fmt: skip


@pytest.mark.parametrize(("case", "change", "error", "message"), BAD_TOGETHER,
                         ids=[case[0] for case in BAD_TOGETHER])  # fmt: skip
def test_bad_input_is_refused_before_anything_is_sent(
    together: Together, s3: S3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    case: str, change: dict[str, Any], error: type[Exception], message: str,
) -> None:  # fmt: skip
    folder = arthex_checkpoint(tmp_path, 2)
    if change.get("folder") == "missing":
        folder = folder.parent / "0099"
    elif change.get("folder") == "full":  # a full fine-tune: weights, no adapter

        def weights(into: Path) -> None:
            (into / "model.safetensors").write_bytes(b"weights")

        publish(folder.parents[1], 8, weights, {})
        folder = folder.parent / "0008"
    for name, value in change.get("env", {}).items():
        monkeypatch.delenv(name) if value is None else monkeypatch.setenv(name, value)
    prefix = f"bad-{secrets.token_hex(4)}"
    config = change.get("config", TogetherDeploymentConfig(s3_bucket=BUCKET, prefix=prefix))
    deploying = deploy_model(
        model(tmp_path, change.get("base_model", TOGETHER_BASE)), str(folder),
        change.get("step", 2), change.get("provider", "together"), config,
    )  # fmt: skip
    with pytest.raises(error) as refused:
        asyncio.run(deploying)
    assert message in str(refused.value) and "\n" not in str(refused.value)
    assert together.requests == [] and together.jobs == {}
    assert s3.keys(f"{BUCKET}/{prefix}") == []
    if error is UnsupportedBaseModelDeploymentError:
        assert refused.value.status_code == 400  # type: ignore[attr-defined]


# -- W&B -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def wandb_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """wandb in offline mode with every folder it writes under one of the tests' own (wandb
    reads these once per process, so one home for the module)."""
    pytest.importorskip("wandb")
    home = tmp_path_factory.mktemp("wandb-home")
    with pytest.MonkeyPatch.context() as patch:
        sandbox_environment(patch, home)
        patch.setenv("WANDB_DIR", str(home))  # the deployment's runs name no folder
        patch.delenv("WANDB_ENTITY", raising=False)
        yield home
    import wandb

    wandb.teardown()  # the SDK's service this process started, and the WANDB_SERVICE it set


@pytest.fixture
def wandb_offline(wandb_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("WANDB_API_KEY", "a" * 40)
    return wandb_home


def written(home: Path) -> set[Path]:
    return {path for path in home.rglob("*") if path.is_file() and "logs" not in path.parts}


def new_run(home: Path, before: set[Path]) -> Any:
    (run_dir,) = [path for path in offline_run_dirs(home) if path not in before]
    run = read_offline_run(run_dir, wait=10.0)
    assert run.finished
    return run


def md5(data: bytes) -> str:
    return base64.b64encode(hashlib.md5(data).digest()).decode()


def test_a_step_is_staged_as_a_wandb_lora_artifact(wandb_offline: Path, tmp_path: Path) -> None:
    folder = arthex_checkpoint(tmp_path, 3)
    trained = model(tmp_path, WANDB_BASE, entity="my-team")
    config = WandbDeploymentConfig(provenance=["local-rl", "serverless-rl"])
    before = set(offline_run_dirs(wandb_offline))
    result = asyncio.run(deploy_model(trained, str(folder), 3, "wandb", config))
    assert result.inference_model_name == f"wandb-artifact:///my-team/{PROJECT}/{RUN}:step3"

    run = new_run(wandb_offline, before)
    assert (run.display_name, run.entity, run.project) == (
        f"{RUN} (deployment)",
        "my-team",
        PROJECT,
    )
    (artifact,) = run.artifacts
    assert (artifact.name, artifact.type) == (RUN, "lora")
    assert sorted(artifact.aliases) == ["latest", "step3"]  # wandb keeps them as a set
    assert artifact.metadata == {
        "wandb.base_model": WANDB_BASE,
        "wandb.provenance": ["local-rl", "serverless-rl"],
    }
    assert artifact.storage_policy_config["storageRegion"] == "coreweave-us"
    physical = files_of(folder)
    staged = {entry.path: entry for entry in artifact.files}
    assert sorted(staged) == ["adapter_config.json", "adapter_model.safetensors"]
    for path, entry in staged.items():
        assert entry.local_path.read_bytes() == physical[path]  # the copy `wandb sync` uploads
        assert (entry.size, entry.digest) == (len(physical[path]), md5(physical[path]))


def test_an_art_step_without_provenance_is_staged_whole(
    wandb_offline: Path, tmp_path: Path
) -> None:
    folder = art_checkpoint(tmp_path, 9)
    before = set(offline_run_dirs(wandb_offline))
    name = deploy_wandb(model(tmp_path, WANDB_BASE, entity="me"), str(folder), 9)
    assert name == f"wandb-artifact:///me/{PROJECT}/{RUN}:step9"
    (artifact,) = new_run(wandb_offline, before).artifacts
    assert artifact.metadata == {"wandb.base_model": WANDB_BASE}
    staged = {entry.path: entry.local_path.read_bytes() for entry in artifact.files}
    assert staged == files_of(folder)


def test_an_open_training_run_is_neither_logged_into_nor_finished(
    wandb_offline: Path, tmp_path: Path
) -> None:
    import wandb

    folder = arthex_checkpoint(tmp_path, 4)
    training = wandb.init(project=PROJECT, name="training", reinit="create_new")
    try:
        before = set(offline_run_dirs(wandb_offline))
        deploy_wandb(model(tmp_path, WANDB_BASE, entity="me"), str(folder), 4)
        training.log({"reward": 1.0})  # still open: a finished run refuses this
        (artifact,) = new_run(wandb_offline, before).artifacts  # a run of the deployment's own
        assert artifact.type == "lora"
    finally:
        training.finish()


BAD_WANDB: list[tuple[str, dict[str, Any], type[Exception], str]] = [
    ("base model", {"base_model": TOGETHER_BASE.replace("Qwen2.5", "Qwen9")},
     UnsupportedBaseModelDeploymentError, "not supported for serverless LoRA deployment by W&B"),
    ("no key", {"env": "WANDB_API_KEY"}, ValueError, "WANDB_API_KEY is not set"),
    ("entity", {"entity": "../team"}, InvalidInputError, "model.entity"),
    ("no entity offline", {"entity": None}, InvalidInputError, "set model.entity"),
    ("no folder", {"folder": "missing"}, FileNotFoundError, "Checkpoint not found at"),
    ("wrong config", {"config": TogetherDeploymentConfig()}, TypeError,
     "Expected WandbDeploymentConfig for provider 'wandb', got TogetherDeploymentConfig"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "change", "error", "message"), BAD_WANDB,
                         ids=[case[0] for case in BAD_WANDB])  # fmt: skip
def test_bad_input_for_wandb_writes_nothing(
    wandb_offline: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    case: str, change: dict[str, Any], error: type[Exception], message: str,
) -> None:  # fmt: skip
    folder = arthex_checkpoint(tmp_path, 2)
    if change.get("folder") == "missing":
        folder = folder.parent / "0099"
    if "env" in change:
        monkeypatch.delenv(change["env"])
    trained = model(tmp_path, change.get("base_model", WANDB_BASE),
                    entity=change.get("entity", "team"))  # fmt: skip
    before = written(wandb_offline)
    with pytest.raises(error) as refused:
        asyncio.run(deploy_model(trained, str(folder), 2, "wandb", change.get("config")))
    assert message in str(refused.value)
    assert written(wandb_offline) == before  # no run, no staged file
