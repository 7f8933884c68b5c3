"""A Tinker run's weights, out of Tinker: a step's LoRA adapter downloaded as PEFT files and
written by arthex's own export code (adapters/local/export.py) as a PEFT folder or a merged
Hugging Face model.

The pinned SDK downloads weights the way its `tinker checkpoint download` does: a training
client holding the step's weights saves them as external weights (`save_weights_external`,
with a TTL, so a crash leaves nothing behind for long), `RestClient.get_external_weights_urls`
signs one expiring URL per file, each file is fetched over plain HTTPS, and the temporary
external weights are deleted. A URL that has expired (403), or is about to, is signed again.

What arrives is checked before anything is written: the files' total size against the size the
service lists for the checkpoint (a cut-short download is refused), and the adapter config's base
model and LoRA rank against the run's record.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import secrets
from pathlib import Path
from typing import Any

from ...core.errors import ArthexError, BackendError, CorruptDataError, InvalidInputError
from ...ports.training_backend import ExportFormat
from .clients import RestClientLike, TrainingClientLike, call
from .record import RunRecord, training_run_of

EXPORT_TTL_S = 3600  # the service's shortest TTL: the temporary weights outlive the download
RESIGN_MARGIN = dt.timedelta(seconds=60)  # sign again when a URL has less than this left
MAX_SIGNINGS = 4
ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
CHUNK = 1 << 20
# The families whose Tinker LoRA adapters PEFT merges into the Hugging Face model: dense
# decoders (Qwen2/2.5, Qwen3 dense, Llama 3.x). Tinker's MoE models (Qwen3 MoE and Qwen3-VL,
# gpt-oss, DeepSeek-V3.1, Kimi K2) train LoRA on the experts in a layout PEFT does not merge.
MERGEABLE_MODEL_TYPES: tuple[str, ...] = ("llama", "qwen2", "qwen3")
MERGEABLE_ARCHITECTURES: tuple[str, ...] = (
    "LlamaForCausalLM",
    "Qwen2ForCausalLM",
    "Qwen3ForCausalLM",
)


async def download_adapter(
    training: TrainingClientLike,
    rest: RestClientLike,
    record: RunRecord,
    step: int,
    dest: Path,
    timeout_s: float | None,
) -> None:
    """Download the weights `training` holds (those of `step`) into the empty folder `dest`
    as `adapter_model.safetensors` + `adapter_config.json`, checked against `record`."""
    import asyncio

    name = f"arthex-export-{step:06d}-{secrets.token_hex(4)}"
    saved = await call(
        f"saving step {step} as external weights",
        timeout_s,
        training.save_weights_external,
        name,
        ttl_seconds=EXPORT_TTL_S,
    )
    path = saved.path
    try:
        listed = await _listed_size(rest, path, timeout_s)

        async def sign() -> Any:
            return await call(
                f"signing the URLs of {path}", timeout_s, rest.get_external_weights_urls, path
            )

        await asyncio.to_thread(_fetch_all, sign, asyncio.get_running_loop(), path, dest, listed)
    finally:
        try:
            await call(f"deleting {path}", timeout_s, rest.delete_checkpoint_from_tinker_path, path)
        except ArthexError:
            pass  # it expires with its TTL
    check_adapter(dest, record, path)


async def _listed_size(rest: RestClientLike, path: str, timeout_s: float | None) -> int | None:
    run_id = training_run_of(path)
    listing = await call(
        f"listing the checkpoints of {run_id}", timeout_s, rest.list_checkpoints, run_id
    )
    for checkpoint in listing.checkpoints:
        if checkpoint.tinker_path == path:
            return checkpoint.size_bytes
    raise BackendError(f"Tinker does not list the external weights it just saved: {path}")


def _fetch_all(sign: Any, loop: Any, path: str, dest: Path, listed: int | None) -> None:
    """Fetch every file (on a worker thread; signing runs on the event loop)."""
    import asyncio

    import httpx

    def signed() -> Any:
        return asyncio.run_coroutine_threadsafe(sign(), loop).result()

    response = signed()
    signings = 1
    names = sorted(response.urls)
    if set(names) != {ADAPTER_WEIGHTS, ADAPTER_CONFIG}:
        raise CorruptDataError(
            f"{path} holds {names}, not a LoRA adapter ({ADAPTER_WEIGHTS}, {ADAPTER_CONFIG})"
        )
    total = 0
    with httpx.Client(timeout=120.0, follow_redirects=True) as client:
        for name in names:
            while True:
                if dt.datetime.now(dt.UTC) >= response.expires - RESIGN_MARGIN:
                    expired = True
                else:
                    expired = not _fetch(client, response.urls[name], dest / name, path)
                if not expired:
                    break
                if signings >= MAX_SIGNINGS:
                    raise BackendError(
                        f"the download URLs of {path} kept expiring ({signings} signings)"
                    )
                response, signings = signed(), signings + 1
            total += (dest / name).stat().st_size
    if listed is not None and total != listed:
        raise CorruptDataError(
            f"the download of {path} is incomplete: {total} bytes arrived, Tinker lists "
            f"{listed}; nothing was written"
        )


def _fetch(client: Any, url: str, target: Path, path: str) -> bool:
    """Fetch one file; False when its URL has expired (403)."""
    import httpx

    try:
        with client.stream("GET", url) as response:
            if response.status_code == 403:
                return False
            if response.status_code >= 400:
                response.read()
                raise BackendError(
                    f"downloading {target.name} of {path} failed: HTTP {response.status_code} "
                    f"{response.text[:200]}"
                )
            expected = response.headers.get("content-length")
            received = 0
            with target.open("wb") as sink:
                for chunk in response.iter_bytes(CHUNK):
                    sink.write(chunk)
                    received += len(chunk)
    except httpx.HTTPError as exc:
        raise BackendError(f"downloading {target.name} of {path} failed: {exc}") from exc
    if expected is not None and int(expected) != received:
        raise CorruptDataError(
            f"the download of {target.name} of {path} is incomplete: {received} of {expected} bytes"
        )
    return True


def check_adapter(folder: Path, record: RunRecord, path: str) -> None:
    """The adapter config names the run's base model and LoRA rank."""
    try:
        config = json.loads((folder / ADAPTER_CONFIG).read_text())
    except (OSError, ValueError) as exc:
        raise CorruptDataError(f"{ADAPTER_CONFIG} of {path} is not JSON: {exc}") from exc
    if not isinstance(config, dict):
        raise CorruptDataError(f"{ADAPTER_CONFIG} of {path} is not a JSON object")
    base, rank = config.get("base_model_name_or_path"), config.get("r")
    if base != record.base_model:
        raise CorruptDataError(
            f"{path} is an adapter of {base!r}, but the run trains {record.base_model!r}"
        )
    if rank != record.lora_rank:
        raise CorruptDataError(
            f"{path} is an adapter of LoRA rank {rank!r}, but the run has rank {record.lora_rank}"
        )


async def export_run(
    model_dir: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    step: int | None = None,
    format: ExportFormat = "merged",
    dtype: str | None = None,
    base_url: str | None = None,
    api_key: str | None = None,
    timeout_s: float | None = None,
) -> Path:
    """Export step `step` (latest when None) of the Tinker run recorded in `model_dir` without
    a backend (what `arthex export` does): a new Tinker session loads the step's saved state,
    the adapter is downloaded and written, and the session is finished. Nothing in
    `model_dir` is written. `base_url`/`api_key` None use the SDK's own lookup."""
    import asyncio

    from .clients import SdkClients, release
    from .record import read_record

    run_dir = Path(model_dir)
    record = await asyncio.to_thread(read_record, run_dir)
    if record is None:
        raise InvalidInputError(f"{run_dir} has no tinker-run.json: it is not a Tinker run")
    chosen = record.step if step is None else step
    checkpoint = record.checkpoint(chosen)
    if checkpoint is None or checkpoint.state_path is None:
        have = [c.step for c in record.checkpoints if c.state_path]
        raise InvalidInputError(
            f"{run_dir} has no saved state of step {chosen} to export (steps with one: {have})"
        )
    target = Path(out_dir)
    await asyncio.to_thread(check_free, target)
    if format == "merged":
        await asyncio.to_thread(check_mergeable, record.base_model)
    clients = SdkClients(base_url, api_key)
    service = await asyncio.to_thread(clients.service)
    try:
        training = await call(
            f"loading {checkpoint.state_path}",
            timeout_s,
            service.create_training_client_from_state,
            checkpoint.state_path,
        )
        rest = await asyncio.to_thread(clients.rest)
        return await export_from(training, rest, record, chosen, target, format, dtype, timeout_s)
    finally:
        try:
            await call("finishing the session", 30.0, service.close, "success")
        except ArthexError:
            pass  # the service ends a session whose heartbeat stops
        finally:
            await asyncio.to_thread(release, service, 10.0)


async def export_from(
    training: TrainingClientLike,
    rest: RestClientLike,
    record: RunRecord,
    step: int,
    target: Path,
    format: ExportFormat,
    dtype: str | None,
    timeout_s: float | None,
) -> Path:
    """Download the adapter `training` holds into a temp folder and export it to `target`."""
    import asyncio
    import tempfile

    from ..local.export import export_adapter

    with tempfile.TemporaryDirectory(prefix="arthex-tinker-export-") as temp:
        await download_adapter(training, rest, record, step, Path(temp), timeout_s)
        return await asyncio.to_thread(
            export_adapter, Path(temp), record.base_model, target, format=format, dtype=dtype
        )


def check_mergeable(base_model: str) -> None:
    """A merged export of `base_model` is refused, before anything is downloaded, when its
    `config.json` names a family arthex cannot merge. A config that cannot be read here is
    left to the merge itself (which needs the base model anyway)."""
    from ..local.export import _base_file

    try:
        file = _base_file(base_model, "config.json")
        config = json.loads(file.read_text()) if file is not None else None
    except (ArthexError, OSError, ValueError):
        return
    if not isinstance(config, dict):
        return
    model_type = config.get("model_type")
    architectures = config.get("architectures") or []
    if model_type in MERGEABLE_MODEL_TYPES or (
        model_type is None and any(a in MERGEABLE_ARCHITECTURES for a in architectures)
    ):
        return
    family = model_type or ", ".join(str(a) for a in architectures) or "no model_type"
    raise InvalidInputError(
        f"arthex cannot merge a Tinker LoRA adapter into {base_model!r} (family {family!r}; "
        f'it merges {", ".join(MERGEABLE_MODEL_TYPES)}); export it with format="peft" '
        "(--format peft), which still works"
    )


def check_free(target: Path) -> None:
    """`target` is new or an empty folder (checked before anything is fetched)."""
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise InvalidInputError(
            f"{target} already exists and is not an empty folder; export into a new one"
        )
