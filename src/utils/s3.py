"""A run folder on S3, as ART's `art.utils.s3` moves it, without the `aws` command: pyarrow's
S3 filesystem does the copying (`adapters/tree_sync.py`), boto3 only signs a download URL.

The keys are ART's, so a model pushed by one is pulled by the other:

    s3://{bucket}/{prefix}/{project}/models/{name}/...                  (push, pull)
    s3://{bucket}/{prefix}/{project}/models/{name}/checkpoints/{step:04d}/...
    s3://{bucket}/{prefix}/{project}/models/{name}/zipped-steps/{step:04d}.zip

The store is reached as the trajectory store reaches it (`pyarrow.fs.FileSystem.from_uri`:
AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ENDPOINT_URL, ~/.aws), or through a
configured `filesystem=` (a `pyarrow.fs.S3FileSystem`); `profile=` takes the named profile's
credentials (through boto3: `pip install "arthex[s3]"`). Every call is tried again while the
store is busy or down, for `retry_budget` seconds, then fails with one line naming the key.

Where arthex differs from ART, on purpose (docs/migrating-from-art.md): names that become
keys or folders are checked first; a checkpoint is copied with its completeness marker last,
so a reader on either side never takes half of one for a step; a pull from a bucket that does
not exist fails, naming it (ART creates the bucket); pulling a `step` that has no whole
checkpoint on S3 fails, naming its key, before anything is written (ART leaves an empty folder);
a sync with `delete` from a source that holds nothing is refused (ART's empties the other side).
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal, get_args

from ..adapters.layout import CHECKPOINTS, step_name
from ..adapters.local.checkpoints import whole_checkpoint
from ..adapters.parquet.retrying import DEFAULT_RETRY_BUDGET, check_budget
from ..adapters.tree_sync import Tree, TreeSyncError, copy_one, list_tree, sync_tree
from ..core.errors import ArthexError, InvalidInputError, require_extra
from ..core.identity import validate_name
from .output_dirs import get_output_dir_from_model_properties, get_step_checkpoint_dir

if TYPE_CHECKING:
    import pyarrow.fs as pafs

__all__ = [
    "ExcludableOption",
    "ForbiddenBucketCreationError",
    "S3SyncError",
    "archive_and_presign_step_url",
    "build_s3_path",
    "build_s3_zipped_step_path",
    "ensure_bucket_exists",
    "pull_model_from_s3",
    "push_model_to_s3",
    "s3_sync",
]

ExcludableOption = Literal["checkpoints", "logs", "trajectories"]
"""The top-level folders of a run that a pull can leave out."""
EXCLUDABLE: tuple[str, ...] = get_args(ExcludableOption)
S3SyncError = TreeSyncError  # ART's name for a failed sync
PRESIGNED_SECONDS = 3600
ZIPPED_STEPS = "zipped-steps"
BUCKET_ENV = "BACKUP_BUCKET"

logger = logging.getLogger("arthex")

_BUCKET = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{1,253}[A-Za-z0-9]")


class ForbiddenBucketCreationError(ArthexError):
    """The bucket does not exist and could not be created (it belongs to someone else, or the
    credentials may not create buckets). `status_code` 403, as ART's."""

    status_code = 403

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.detail = message


# -- keys -------------------------------------------------------------------------------------


def bucket_name(s3_bucket: str | None) -> str:
    """`s3_bucket`, else $BACKUP_BUCKET; checked to be a bucket name."""
    bucket = os.environ.get(BUCKET_ENV) if s3_bucket is None else s3_bucket
    if not bucket:
        raise InvalidInputError(f"no S3 bucket given: pass s3_bucket= or set ${BUCKET_ENV}")
    if not isinstance(bucket, str) or _BUCKET.fullmatch(bucket) is None:
        raise InvalidInputError(
            f"s3_bucket {bucket!r} is not a bucket name (3-255 letters, digits, '.', '-', '_'; "
            "no 's3://', no slash)"
        )
    return bucket


def _prefix_part(prefix: str | None) -> str:
    if not prefix:
        return ""
    if not isinstance(prefix, str):
        raise InvalidInputError(f"prefix must be a string, got {type(prefix).__name__}")
    stripped = prefix.strip("/")
    if not stripped:
        return ""
    for segment in stripped.split("/"):
        validate_name(segment, f"prefix segment of {prefix!r}")
    return f"{stripped}/"


def _step(step: object) -> int:
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise InvalidInputError(f"step must be an integer >= 0, got {step!r}")
    return step


def build_s3_path(
    *,
    model_name: str,
    project: str,
    step: int | None = None,
    s3_bucket: str | None = None,
    prefix: str | None = None,
) -> str:
    """`s3://{bucket}/{prefix}/{project}/models/{model_name}`, or its checkpoint folder
    `.../checkpoints/{step:04d}` when `step` is given."""
    path = (
        f"s3://{bucket_name(s3_bucket)}/{_prefix_part(prefix)}{validate_name(project, 'project')}"
        f"/models/{validate_name(model_name, 'model_name')}"
    )
    return path if step is None else f"{path}/{CHECKPOINTS}/{step_name(_step(step))}"


def build_s3_zipped_step_path(
    *,
    model_name: str,
    project: str,
    step: int,
    s3_bucket: str | None = None,
    prefix: str | None = None,
) -> str:
    """`.../models/{model_name}/zipped-steps/{step:04d}.zip`: one checkpoint as a zip."""
    base = build_s3_path(model_name=model_name, project=project, s3_bucket=s3_bucket, prefix=prefix)
    return f"{base}/{ZIPPED_STEPS}/{step_name(_step(step))}.zip"


# -- reaching the store -----------------------------------------------------------------------


def tree(where: str, filesystem: pafs.FileSystem | None = None, profile: str | None = None) -> Tree:
    """The tree at a local path or an `s3://` URI, its filesystem `filesystem`, or one with
    `profile`'s credentials, or the AWS environment's."""
    if "://" not in where:
        return Tree.of(where)
    if filesystem is None and profile is not None:
        filesystem = profile_filesystem(profile)
    if filesystem is not None:
        return Tree.of(where.split("://", 1)[1], filesystem)
    return Tree.of(where)


def profile_filesystem(profile: str, bucket_creation: bool = False) -> pafs.FileSystem:
    """An S3 filesystem with the credentials and region of the AWS profile `profile` (read by
    boto3, as the `aws` command reads it), at AWS_ENDPOINT_URL when that is set."""
    require_extra("s3", "boto3")
    import boto3
    import botocore.exceptions
    import pyarrow.fs as pafs

    try:
        session = boto3.Session(profile_name=profile)
        credentials = session.get_credentials()
    except botocore.exceptions.BotoCoreError as error:
        raise InvalidInputError(f"cannot use the AWS profile {profile!r}: {error}") from error
    if credentials is None:
        raise InvalidInputError(f"the AWS profile {profile!r} has no credentials")
    frozen = credentials.get_frozen_credentials()
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    scheme, _, host = (endpoint or "").rpartition("://")
    return pafs.S3FileSystem(
        access_key=frozen.access_key,
        secret_key=frozen.secret_key,
        session_token=frozen.token,
        region=session.region_name,
        endpoint_override=host or None,
        scheme=scheme or "https",
        allow_bucket_creation=bucket_creation,
    )


def _exclusions(exclude: Sequence[str] | None) -> list[str]:
    chosen = list(exclude or [])
    for folder in chosen:
        if folder not in EXCLUDABLE:
            raise InvalidInputError(
                f"cannot exclude {folder!r}: exclude takes folders among {list(EXCLUDABLE)}"
            )
    return chosen


async def s3_sync(
    source: str,
    destination: str,
    *,
    profile: str | None = None,
    verbose: bool = False,
    delete: bool = False,
    exclude: list[ExcludableOption] | None = None,
    filesystem: pafs.FileSystem | None = None,
    retry_budget: float = DEFAULT_RETRY_BUDGET,
) -> None:
    """Make `destination` like `source`, either a local path or an `s3://` URI (`aws s3 sync`
    for a folder, `aws s3 cp` for a file). Copied: what the destination lacks, or has with
    another size or older; `delete` removes destination files the source lacks; each
    `exclude`d top-level folder is left alone on both sides. `verbose` prints a line per file.
    A failure raises S3SyncError, one line naming the key."""
    excluded = _exclusions(exclude)
    budget = check_budget(retry_budget)
    origin = tree(source, filesystem, profile)
    target = tree(destination, filesystem, profile)
    report = print if verbose else None
    if origin.local and await asyncio.to_thread(os.path.isfile, origin.path):
        await asyncio.to_thread(copy_one, origin, target, budget)
        if report is not None:
            report(f"copy: {origin.label()} to {target.label()}")
        return
    await asyncio.to_thread(
        sync_tree, origin, target, delete=delete, exclude=excluded, budget=budget, report=report
    )


async def ensure_bucket_exists(
    s3_bucket: str | None = None,
    profile: str | None = None,
    *,
    filesystem: pafs.FileSystem | None = None,
    retry_budget: float = DEFAULT_RETRY_BUDGET,
) -> None:
    """Create the bucket unless it exists; ForbiddenBucketCreationError when that fails."""
    bucket = bucket_name(s3_bucket)
    budget = check_budget(retry_budget)
    await asyncio.to_thread(_ensure_bucket, bucket, profile, filesystem, budget)


def _bucket_exists(filesystem: pafs.FileSystem, bucket: str, budget: float) -> bool:
    import pyarrow.fs as pafs

    from ..adapters.tree_sync import store_call

    info = store_call(f"looking up s3://{bucket}", lambda: filesystem.get_file_info(bucket), budget)
    return bool(info.type != pafs.FileType.NotFound)


def _ensure_bucket(
    bucket: str, profile: str | None, filesystem: pafs.FileSystem | None, budget: float
) -> None:
    from ..adapters.tree_sync import store_call

    if filesystem is None:
        filesystem = _bucket_filesystem(bucket, profile)
    if _bucket_exists(filesystem, bucket, budget):
        return
    logger.info("S3 bucket %s does not exist, creating it", bucket)
    try:
        store_call(f"creating s3://{bucket}", lambda: filesystem.create_dir(bucket), budget)
    except TreeSyncError as error:
        raise ForbiddenBucketCreationError(
            f"could not create the bucket {bucket!r}: it may belong to someone else, or these "
            f"credentials may not create buckets ({error})"
        ) from error


def _bucket_filesystem(bucket: str, profile: str | None) -> pafs.FileSystem:
    """A filesystem that may create `bucket` (pyarrow's from a URI may not, by default)."""
    if profile is not None:
        return profile_filesystem(profile, bucket_creation=True)
    uri = f"s3://{bucket}?allow_bucket_creation=true"
    found = Tree.of(uri).filesystem
    assert found is not None
    return found


# -- a model's folder -------------------------------------------------------------------------


async def pull_model_from_s3(
    model_name: str,
    project: str,
    step: int | None = None,
    s3_bucket: str | None = None,
    prefix: str | None = None,
    verbose: bool = False,
    delete: bool = False,
    art_path: str | None = None,
    exclude: list[ExcludableOption] | None = None,
    *,
    filesystem: pafs.FileSystem | None = None,
    retry_budget: float = DEFAULT_RETRY_BUDGET,
) -> str:
    """Copy the model's folder from S3 into `{art_path}/{project}/models/{model_name}` (only
    its checkpoint `step`, when given: a whole checkpoint on S3, else S3SyncError naming its
    key); `delete` removes local files S3 lacks, `exclude` leaves top-level folders alone.
    Returns the local model folder."""
    local_dir = get_output_dir_from_model_properties(project, model_name, art_path)
    key = build_s3_path(
        model_name=model_name, project=project, step=step, s3_bucket=s3_bucket, prefix=prefix
    )
    _exclusions(exclude)
    budget = check_budget(retry_budget)
    source = tree(key, filesystem)
    if filesystem is None:
        assert source.filesystem is not None
        filesystem = source.filesystem
    bucket = bucket_name(s3_bucket)
    if not await asyncio.to_thread(_bucket_exists, filesystem, bucket, budget):
        raise S3SyncError(f"pulling {key} failed: the bucket {bucket!r} does not exist")
    if step is not None:
        files = await asyncio.to_thread(list_tree, source, budget)
        if not whole_checkpoint({p for p in files if "/" not in p}):
            held = ", ".join(sorted(files)[:6]) or "nothing"
            raise S3SyncError(
                f"pulling {key} failed: no whole checkpoint of step {step} there (it holds "
                f"{held}); get_latest_checkpoint_step_from_s3 names the steps that are whole"
            )
        local = get_step_checkpoint_dir(local_dir, step)
    else:
        local = local_dir
    os.makedirs(local_dir, exist_ok=True)
    await s3_sync(
        key, local, verbose=verbose, delete=delete, exclude=exclude, filesystem=filesystem,
        retry_budget=budget,
    )  # fmt: skip
    return local_dir


async def push_model_to_s3(
    model_name: str,
    project: str,
    s3_bucket: str | None = None,
    prefix: str | None = None,
    verbose: bool = False,
    delete: bool = False,
    art_path: str | None = None,
    *,
    filesystem: pafs.FileSystem | None = None,
    retry_budget: float = DEFAULT_RETRY_BUDGET,
) -> None:
    """Copy `{art_path}/{project}/models/{model_name}` to S3 (creating the bucket if needed);
    `delete` removes keys the local folder lacks. Checkpoints being written (`.tmp-*`) stay."""
    local_dir = get_output_dir_from_model_properties(project, model_name, art_path)
    if not await asyncio.to_thread(os.path.isdir, local_dir):
        raise FileNotFoundError(f"the local model folder {local_dir} does not exist")
    key = build_s3_path(model_name=model_name, project=project, s3_bucket=s3_bucket, prefix=prefix)
    await ensure_bucket_exists(s3_bucket, filesystem=filesystem, retry_budget=retry_budget)
    await s3_sync(
        local_dir, key, verbose=verbose, delete=delete, filesystem=filesystem,
        retry_budget=retry_budget,
    )  # fmt: skip


async def archive_and_presign_step_url(
    model_name: str,
    project: str,
    step: int,
    s3_bucket: str | None = None,
    prefix: str | None = None,
    verbose: bool = False,
    delete: bool = False,
    art_path: str | None = None,
    checkpoint_path: str | None = None,
    *,
    filesystem: pafs.FileSystem | None = None,
    retry_budget: float = DEFAULT_RETRY_BUDGET,
    files: Sequence[str] | None = None,
) -> str:
    """Zip the checkpoint folder of `step` (or `checkpoint_path`), upload it to
    `.../zipped-steps/{step:04d}.zip` and return a URL that downloads it for an hour (signed
    by boto3 with the AWS environment's credentials: `pip install "arthex[s3]"`). `delete`
    is accepted for ART's signature and does nothing to a single file, as in ART. `files`
    (paths relative to the folder) zips only those, at the archive's root as in the folder."""
    del delete
    require_extra("s3", "boto3")
    if checkpoint_path is None:
        local_dir = get_output_dir_from_model_properties(project, model_name, art_path)
        checkpoint_path = get_step_checkpoint_dir(local_dir, _step(step))
    folder = Path(checkpoint_path)
    if not await asyncio.to_thread(folder.is_dir):
        raise InvalidInputError(f"the checkpoint folder {folder} does not exist")
    chosen = None if files is None else _chosen_files(folder, files)
    key = build_s3_zipped_step_path(
        model_name=model_name, project=project, step=step, s3_bucket=s3_bucket, prefix=prefix
    )
    with tempfile.TemporaryDirectory() as scratch:
        archive = Path(scratch) / "model.zip"
        await asyncio.to_thread(_zip_folder, folder, archive, chosen)
        await ensure_bucket_exists(s3_bucket, filesystem=filesystem, retry_budget=retry_budget)
        await s3_sync(
            str(archive), key, verbose=verbose, filesystem=filesystem, retry_budget=retry_budget
        )
    url = await asyncio.to_thread(presigned_url, key)
    if verbose:
        print("presigned_url", url)
    return url


def _chosen_files(folder: Path, files: Sequence[str]) -> list[Path]:
    """The files named, each a file inside `folder`; checked before anything is zipped."""
    chosen = []
    for name in files:
        path = folder / name
        if Path(name).is_absolute() or ".." in Path(name).parts or not path.is_file():
            raise InvalidInputError(f"{name!r} is not a file inside the checkpoint folder {folder}")
        chosen.append(path)
    return chosen


def _zip_folder(folder: Path, archive: Path, files: Sequence[Path] | None = None) -> None:
    paths = sorted(folder.rglob("*")) if files is None else sorted(files)
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zipped:
        for path in paths:
            if path.is_file():
                zipped.write(path, path.relative_to(folder).as_posix())


def presigned_url(key: str, seconds: int = PRESIGNED_SECONDS) -> str:
    """A GET URL for `s3://bucket/key`, valid for `seconds` (boto3 signs it)."""
    require_extra("s3", "boto3")
    import boto3

    bucket, _, name = key.removeprefix("s3://").partition("/")
    client = boto3.Session().client("s3")
    url: str = client.generate_presigned_url(
        "get_object", Params={"Bucket": bucket, "Key": name}, ExpiresIn=seconds
    )
    return url
