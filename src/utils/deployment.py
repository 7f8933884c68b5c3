"""A trained step's LoRA adapter deployed to a hosted inference provider, as ART 0.5.23's
`art.utils.deployment` deploys one: to Together (the adapter zipped to S3, a presigned URL
handed to Together's model-upload API, the job polled) or to W&B (the adapter logged as a
`lora` artifact, served as `wandb-artifact:///{entity}/{project}/{run}:step{N}`).

ART's arguments, defaults, errors, return values and variables (TOGETHER_API_KEY,
WANDB_API_KEY, BACKUP_BUCKET for the bucket, the AWS environment for S3). The provider
clients are adapters (`adapters/together_api.py` over httpx, `adapters/wandb_artifacts.py`
over the wandb SDK), imported inside the calls: `pip install "arthex[deploy]"`.

Where arthex differs from ART, on purpose (docs/migrating-from-art.md): every input (the
base model, the API key, the config, the step, the bucket and the names that become its
keys, the checkpoint folder) is checked before anything is uploaded or sent; the folder must
hold a LoRA adapter, and from an arthex checkpoint only the adapter's two files are sent (what
`arthex export --format peft` writes), never the optimizer state; an existing Together job is
looked up before the archive is uploaded, and found by its exact model name (ART takes any
name containing `{project}-{run}-{step}`, so step 1 finds step 12's job); with
`WANDB_MODE=offline` the artifact is staged for `wandb sync` (ART's call fails waiting for an
upload that cannot happen).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Mapping
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, get_args

from pydantic import BaseModel

from ..adapters.local.checkpoints import ADAPTER_FILES, foreign_adapter
from ..core.errors import ArthexError, CorruptDataError, InvalidInputError, require_extra
from ..core.identity import validate_name
from .s3 import archive_and_presign_step_url, bucket_name, build_s3_zipped_step_path

if TYPE_CHECKING:
    from ..adapters.together_api import TogetherApi

__all__ = [
    "TOGETHER_SUPPORTED_BASE_MODELS",
    "WANDB_SUPPORTED_BASE_MODELS",
    "DeployableModel",
    "DeploymentConfig",
    "DeploymentResult",
    "LoRADeploymentJob",
    "LoRADeploymentProvider",
    "LoRADeploymentTimedOutError",
    "Provider",
    "TogetherDeploymentConfig",
    "TogetherJob",
    "TogetherJobStatus",
    "UnsupportedBaseModelDeploymentError",
    "UnsupportedLoRADeploymentProviderError",
    "WandbDeploymentConfig",
    "deploy_model",
    "deploy_to_together",
    "deploy_wandb",
    "deployable_files",
]

logger = logging.getLogger("arthex")

TOGETHER_API_KEY = "TOGETHER_API_KEY"
WANDB_API_KEY = "WANDB_API_KEY"
POLL_SECONDS = 15.0
WAIT_SECONDS = 300.0

Provider = Literal["together", "wandb"]
PROVIDERS: tuple[str, ...] = get_args(Provider)

TOGETHER_SUPPORTED_BASE_MODELS = [
    "meta-llama/Meta-Llama-3.1-8B-Instruct",
    "meta-llama/Meta-Llama-3.1-70B-Instruct",
    "Qwen/Qwen2.5-14B-Instruct",
    "Qwen/Qwen2.5-72B-Instruct",
]
WANDB_SUPPORTED_BASE_MODELS = [
    "meta-llama/Llama-3.1-8B-Instruct",
    "meta-llama/Llama-3.1-70B-Instruct",
    "OpenPipe/Qwen3-14B-Instruct",
    "Qwen/Qwen2.5-14B-Instruct",
]
_OFFLINE_MODES = ("offline", "dryrun")
# Together reports a re-upload of a model it already holds as this failure: the model is there
_ALREADY_EXISTS = (
    "409 Client Error: Conflict for url: https://api.together.ai/api/admin/entity/Model"
)


# -- errors: ART's classes, with their status codes -------------------------------------------


class UnsupportedLoRADeploymentProviderError(InvalidInputError):
    """The provider does not serve LoRA adapters. `status_code` 400, as ART's."""

    status_code = 400

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.detail = message


class UnsupportedBaseModelDeploymentError(InvalidInputError):
    """The provider does not serve LoRA adapters of this base model. `status_code` 400."""

    status_code = 400

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.detail = message


class LoRADeploymentTimedOutError(ArthexError, TimeoutError):
    """The provider's deployment job did not finish in time. `status_code` 504, as ART's."""

    status_code = 504

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.detail = message


# -- ART's shapes ---------------------------------------------------------------------------


class DeployableModel(Protocol):
    """What a deployment reads of a model (arthex's and ART's TrainableModel have it)."""

    @property
    def project(self) -> str: ...

    @property
    def run_name(self) -> str: ...

    @property
    def base_model(self) -> str: ...

    entity: str | None


class DeploymentConfig(BaseModel):
    """Base class of the providers' deployment settings."""


class DeploymentResult(BaseModel):
    """What a deployment gives back."""

    inference_model_name: str
    """The model name to use for inference (e.g. wandb-artifact:///entity/project/name:step1)."""


class TogetherDeploymentConfig(DeploymentConfig):
    """Deploying to Together: the bucket (default $BACKUP_BUCKET) and prefix the zipped adapter
    is uploaded under for Together to fetch, and whether to wait for Together's job."""

    s3_bucket: str | None = None
    prefix: str | None = None
    wait_for_completion: bool = True


class WandbDeploymentConfig(DeploymentConfig):
    """Deploying to W&B: the training provenance kept in the artifact's metadata."""

    provenance: list[str]
    """The training provenance history for this model (e.g. ["local-rl", "serverless-rl"])."""


class TogetherJobStatus(str, Enum):  # noqa: UP042 - ART's class, as ART defines it
    QUEUED = "Queued"
    RUNNING = "Running"
    COMPLETE = "Complete"
    FAILED = "Failed"


class TogetherJob(BaseModel):
    status: TogetherJobStatus
    job_id: str
    model_name: str
    failure_reason: str | None


class LoRADeploymentProvider(str, Enum):  # noqa: UP042 - as ART's
    """ART's older name for the providers."""

    TOGETHER = "together"
    WANDB = "wandb"


class LoRADeploymentJob(BaseModel):
    """ART's older result of a deployment job."""

    status: TogetherJobStatus
    job_id: str
    model_name: str
    failure_reason: str | None


# -- what is checked before anything is sent --------------------------------------------------


def deployable_files(checkpoint_path: str | os.PathLike[str]) -> dict[str, Path]:
    """The files of the checkpoint folder a provider receives (path in the archive -> file):
    every file of a folder holding only a PEFT adapter (ART's checkpoints), the adapter's two
    files of an arthex checkpoint. FileNotFoundError when the folder is missing (ART's), and
    InvalidInputError when it holds no LoRA adapter."""
    folder = Path(checkpoint_path)
    if not folder.exists():
        raise FileNotFoundError(f"Checkpoint not found at {checkpoint_path}")
    if not folder.is_dir():
        raise InvalidInputError(f"the checkpoint {checkpoint_path} is a file, not a folder")
    if not all((folder / name).is_file() for name in ADAPTER_FILES):
        raise InvalidInputError(
            f"the checkpoint folder {checkpoint_path} holds no LoRA adapter "
            f"({' and '.join(ADAPTER_FILES)}); providers serve adapters only (a full "
            "fine-tune: `arthex export --format merged` writes a model folder to serve)"
        )
    if not foreign_adapter(folder):
        return {name: folder / name for name in ADAPTER_FILES}
    return {
        path.relative_to(folder).as_posix(): path
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def _step(step: object) -> int:
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise InvalidInputError(f"step must be an integer >= 0, got {step!r}")
    return step


def _model_fields(model: DeployableModel) -> tuple[str, str, str]:
    project = validate_name(model.project, "model.project")
    run_name = validate_name(model.run_name, "model.run_name")
    base_model = model.base_model
    if not isinstance(base_model, str) or not base_model:
        raise InvalidInputError(f"model.base_model must be a model name, got {base_model!r}")
    return project, run_name, base_model


def _api_key(variable: str, provider: str) -> str:
    key = os.environ.get(variable)
    if not key:
        raise InvalidInputError(f"{variable} is not set, cannot deploy LoRA to {provider}")
    return key


def _say(verbose: bool, message: str) -> None:
    if verbose:
        print(message)
    else:
        logger.info("%s", message)


# -- the entry point ---------------------------------------------------------------------------


async def deploy_model(
    model: DeployableModel,
    checkpoint_path: str,
    step: int,
    provider: Provider,
    config: DeploymentConfig | None = None,
    verbose: bool = False,
) -> DeploymentResult:
    """Deploy the checkpoint folder `checkpoint_path` (step `step` of `model`) to `provider`:
    "together" (a TogetherDeploymentConfig is required) or "wandb" (a WandbDeploymentConfig
    is optional). Returns the model name to ask the provider's inference API for.

    A run's step folder is `get_step_checkpoint_dir(get_model_dir(model), step)`
    (arthex.utils.output_dirs); `arthex export --format peft` writes the same adapter files."""
    if provider not in PROVIDERS:
        raise UnsupportedLoRADeploymentProviderError(
            f"Unsupported provider: {provider}. Use 'together' or 'wandb'."
        )
    if not await asyncio.to_thread(os.path.exists, checkpoint_path):
        raise FileNotFoundError(f"Checkpoint not found at {checkpoint_path}")
    if provider == "wandb":
        if config is not None and not isinstance(config, WandbDeploymentConfig):
            raise TypeError(
                f"Expected WandbDeploymentConfig for provider 'wandb', got {type(config).__name__}"
            )
        name = await asyncio.to_thread(deploy_wandb, model, checkpoint_path, step, config, verbose)
        return DeploymentResult(inference_model_name=name)
    if config is None:
        raise InvalidInputError(
            "Config is required for provider 'together'. "
            "Please provide a TogetherDeploymentConfig with at least s3_bucket specified."
        )
    if not isinstance(config, TogetherDeploymentConfig):
        raise TypeError(
            "Expected TogetherDeploymentConfig for provider 'together', "
            f"got {type(config).__name__}"
        )
    name = await deploy_to_together(model, checkpoint_path, step, config, verbose)
    return DeploymentResult(inference_model_name=name)


# -- W&B ----------------------------------------------------------------------------------------


def deploy_wandb(
    model: DeployableModel,
    checkpoint_path: str,
    step: int,
    config: WandbDeploymentConfig | None = None,
    verbose: bool = False,
) -> str:
    """Log the adapter as the W&B artifact `{run_name}` (type `lora`, aliases `step{step}`
    and `latest`) in `model.entity` (default: the API key's entity, which is then set on the
    model, as ART does) and `model.project`. Returns
    `wandb-artifact:///{entity}/{project}/{run_name}:step{step}`."""
    project, run_name, base_model = _model_fields(model)
    if base_model not in WANDB_SUPPORTED_BASE_MODELS:
        raise UnsupportedBaseModelDeploymentError(
            f"Base model {base_model} is not supported for serverless LoRA deployment by W&B. "
            f"Supported models: {WANDB_SUPPORTED_BASE_MODELS}"
        )
    api_key = _api_key(WANDB_API_KEY, "W&B")
    if config is not None and not isinstance(config, WandbDeploymentConfig):
        raise TypeError(f"Expected WandbDeploymentConfig, got {type(config).__name__}")
    step = _step(step)
    if model.entity is not None:
        validate_name(model.entity, "model.entity")
    elif os.environ.get("WANDB_MODE") in _OFFLINE_MODES:
        raise InvalidInputError(
            f"model.entity is None and W&B is offline (WANDB_MODE={os.environ['WANDB_MODE']}), "
            "so there is no default entity to ask for: set model.entity"
        )
    files = deployable_files(checkpoint_path)
    require_extra("wandb", "wandb")
    from ..adapters import wandb_artifacts

    if model.entity is None:
        model.entity = wandb_artifacts.default_entity(api_key)
    if verbose:
        print(f"Uploading checkpoint from {checkpoint_path} to W&B...")
    metadata: dict[str, object] = {"wandb.base_model": base_model}
    if config is not None:
        metadata["wandb.provenance"] = list(config.provenance)
    wandb_artifacts.log_lora_artifact(
        run_name=run_name,
        entity=model.entity,
        project=project,
        api_key=api_key,
        files=files,
        metadata=metadata,
        aliases=[f"step{step}", "latest"],
        verbose=verbose,
    )
    name = f"wandb-artifact:///{model.entity}/{project}/{run_name}:step{step}"
    if verbose:
        print(f"Successfully deployed to W&B. Inference model name: {name}")
    return name


# -- Together -----------------------------------------------------------------------------------


def checkpoint_id(project: str, run_name: str, step: int) -> str:
    """The name a step is uploaded to Together under: `{project}-{run_name}-{step}`."""
    return f"{project}-{run_name}-{step}"


async def deploy_to_together(
    model: DeployableModel,
    checkpoint_path: str,
    step: int,
    config: TogetherDeploymentConfig,
    verbose: bool = False,
    *,
    poll_seconds: float = POLL_SECONDS,
    wait_seconds: float = WAIT_SECONDS,
) -> str:
    """Deploy the adapter to Together as `{project}-{run_name}-{step}`: unless Together already
    has a job for that name that did not fail, zip the adapter to
    `s3://{bucket}/{prefix}/{project}/models/{run_name}/zipped-steps/{step:04d}.zip`, hand
    Together a URL that downloads it for an hour, and (with `wait_for_completion`) check the
    job every `poll_seconds` until it completes or fails, for `wait_seconds` at most
    (LoRADeploymentTimedOutError). A failed job raises RuntimeError with Together's reason.
    Returns the model name Together serves."""
    if not isinstance(config, TogetherDeploymentConfig):
        raise TypeError(f"Expected TogetherDeploymentConfig, got {type(config).__name__}")
    project, run_name, base_model = _model_fields(model)
    if base_model not in TOGETHER_SUPPORTED_BASE_MODELS:
        raise UnsupportedBaseModelDeploymentError(
            f"Base model {base_model} is not supported for serverless LoRA deployment by "
            f"Together. Supported models: {TOGETHER_SUPPORTED_BASE_MODELS}"
        )
    api_key = _api_key(TOGETHER_API_KEY, "Together")
    step = _step(step)
    for value, what in ((poll_seconds, "poll_seconds"), (wait_seconds, "wait_seconds")):
        if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
            raise InvalidInputError(f"{what} must be a number of seconds >= 0, got {value!r}")
    bucket = bucket_name(config.s3_bucket)
    build_s3_zipped_step_path(  # the names that become the archive's key, checked
        model_name=run_name, project=project, step=step, s3_bucket=bucket, prefix=config.prefix
    )
    files = deployable_files(checkpoint_path)
    require_extra("deploy", "httpx", "boto3")
    from ..adapters.together_api import TogetherApi

    name = checkpoint_id(project, run_name, step)
    async with TogetherApi(api_key) as api:
        existing = await _find_job(api, name)
        job = None if existing is None else await _job(api, existing, verbose)
        if job is None or job.status == TogetherJobStatus.FAILED:
            url = await archive_and_presign_step_url(
                model_name=run_name, project=project, step=step, s3_bucket=bucket,
                prefix=config.prefix, verbose=verbose, checkpoint_path=checkpoint_path,
                files=sorted(files),
            )  # fmt: skip
            job_id = await _upload(api, name, url, base_model, project, run_name, step, verbose)
        else:
            job_id = job.job_id
            _say(
                verbose,
                f"Previous deployment for {run_name} at step {step} has status "
                f"'{job.status.value}', skipping redeployment",
            )
        if config.wait_for_completion:
            job = await _wait(api, job_id, verbose, poll_seconds, wait_seconds)
        else:
            job = await _job(api, job_id, verbose)
    if job.status == TogetherJobStatus.FAILED:
        raise RuntimeError(
            f"Together deployment failed for {run_name} step {step}. "
            f"Job ID: {job.job_id}. Reason: {job.failure_reason}"
        )
    return job.model_name


def _field(mapping: Mapping[str, Any], *path: str) -> Any:
    value: Any = mapping
    for key in path:
        if not isinstance(value, Mapping) or key not in value:
            raise CorruptDataError(f"Together's answer has no {'.'.join(path)}: {value!r}"[:300])
        value = value[key]
    return value


async def _find_job(api: TogetherApi, name: str) -> str | None:
    """The newest job that uploaded the model `name` (or `{user}/{name}`)."""
    jobs = sorted(
        await api.list_jobs(), key=lambda job: str(job.get("updated_at", "")), reverse=True
    )
    for job in jobs:
        arguments = job.get("args")
        model_name = arguments.get("modelName") if isinstance(arguments, Mapping) else None
        if isinstance(model_name, str) and model_name.rsplit("/", 1)[-1] == name:
            return str(_field(job, "job_id"))
    return None


def _status(status: object, message: str | None) -> TogetherJobStatus:
    if status == "Error" and message is not None and _ALREADY_EXISTS in message:
        return TogetherJobStatus.COMPLETE
    if status in ("Bad", "Error"):
        return TogetherJobStatus.FAILED
    if status == "Retry Queued":
        return TogetherJobStatus.QUEUED
    try:
        return TogetherJobStatus(status)
    except ValueError:
        raise CorruptDataError(f"Together answered an unknown job status {status!r}") from None


async def _job(api: TogetherApi, job_id: str, verbose: bool) -> TogetherJob:
    answer = await api.get_job(job_id)
    if verbose:
        print(f"Job status: {json.dumps(answer, indent=4)}")
    updates = answer.get("status_updates") or []
    last = updates[-1] if isinstance(updates, list) and updates else {}
    message = last.get("message") if isinstance(last, Mapping) else None
    message = message if isinstance(message, str) else None
    status = _status(_field(answer, "status"), message)
    reason = answer.get("failure_reason")
    return TogetherJob(
        status=status,
        job_id=job_id,
        model_name=str(_field(answer, "args", "modelName")),
        failure_reason=message if status == TogetherJobStatus.FAILED else reason,
    )


async def _upload(
    api: TogetherApi,
    name: str,
    url: str,
    base_model: str,
    project: str,
    run_name: str,
    step: int,
    verbose: bool,
) -> str:
    answer = await api.upload_model(
        {
            "model_name": name,
            "model_source": url,
            "model_type": "adapter",
            "base_model": base_model,
            "description": f"Deployed from ART. Project: {project}. Run: {run_name}. Step: {step}",
        }
    )
    if verbose:
        print(f"Successfully uploaded to Together: {answer}")
    return str(_field(answer, "data", "job_id"))


async def _wait(
    api: TogetherApi, job_id: str, verbose: bool, poll_seconds: float, wait_seconds: float
) -> TogetherJob:
    _say(verbose, f"checking status of job {job_id} every {poll_seconds:g} seconds for "
                  f"{_duration(wait_seconds)}")  # fmt: skip
    from ..adapters.together_api import TogetherUnavailable

    deadline = time.monotonic() + wait_seconds
    unanswered: TogetherUnavailable | None = None
    while True:
        # the job runs at Together whatever happens to one poll: a poll Together did not
        # answer (a network error, 429, 5xx) is asked again at the next, until the deadline
        try:
            job = await _job(api, job_id, verbose)
        except TogetherUnavailable as error:
            logger.warning("polling Together's job %s: %s; asking again", job_id, error)
            unanswered = error
        else:
            unanswered = None
            if job.status in (TogetherJobStatus.COMPLETE, TogetherJobStatus.FAILED):
                return job
        if time.monotonic() + poll_seconds >= deadline:
            last = f" (the last poll: {unanswered})" if unanswered is not None else ""
            raise LoRADeploymentTimedOutError(
                f"LoRA deployment timed out after {_duration(wait_seconds)}. Job ID: {job_id}"
                + last
            )
        await asyncio.sleep(poll_seconds)


def _duration(seconds: float) -> str:
    if seconds >= 60 and seconds % 60 == 0:
        minutes = int(seconds // 60)
        return f"{minutes} minute{'s' if minutes != 1 else ''}"
    return f"{seconds:g} seconds"
