"""Exporting a step of a model trained on a training server, from the client's side.

The server sends the step's checkpoint folder as a tar (`GET {MODELS_PATH}/{id}/checkpoints/
{step}/files`); it is unpacked, as the folder LocalBackend wrote, into a temporary run folder
here, and exported from there exactly as a local run is (adapters/local/export.py): a merged
model needs the base model the checkpoint names (a hub id, or a folder that exists here too).
"""

from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from ...core.errors import CorruptDataError, InvalidInputError
from ...ports.training_backend import ExportFormat
from ..layout import CHECKPOINTS, step_name
from . import wire
from .client_http import httpx_module, raise_for_status, ssl_context, transport_error

REMOTE_KEY = "remote"  # in the client's model.json: {"server": url, "model_id": id}
REMOTE_FIELDS = ("server", "model_id")
KEY_ENV = "ARTHEX_API_KEY"  # the client's key, as ServerlessBackend reads it


def export_remote(
    base_url: str,
    api_key: str,
    model_id: str,
    out_dir: str | os.PathLike[str],
    *,
    step: int | None = None,
    format: ExportFormat = "merged",
    dtype: str | None = None,
    timeout: float = 600.0,
) -> Path:
    """Fetch step `step` (the server's latest when None) of model `model_id` and export it into
    the new folder `out_dir`; returns the folder."""
    from ..local.export import export_checkpoint

    if format not in ("merged", "peft"):
        raise InvalidInputError(f"format must be 'peft' or 'merged', got {format!r}")
    if not wire.MODEL_ID.fullmatch(model_id):
        raise InvalidInputError(f"{model_id!r:.80} is not a model id of a training server")
    httpx = httpx_module()
    headers = {"Authorization": f"Bearer {api_key}"}
    with (
        httpx.Client(
            base_url=base_url, headers=headers, timeout=timeout, verify=ssl_context()
        ) as client,
        tempfile.TemporaryDirectory(prefix="arthex-export-") as temp,
    ):
        path = f"{wire.MODELS_PATH}/{model_id}/checkpoints"
        if step is None:
            step = int(_get(client, path, base_url).json()["step"])
        folder = Path(temp) / CHECKPOINTS / step_name(step)
        folder.mkdir(parents=True)
        archive = Path(temp) / "checkpoint.tar"
        files_path = f"{path}/{step}/files"
        try:
            with client.stream("GET", files_path) as response:
                if response.status_code >= 400:
                    response.read()
                raise_for_status("GET", files_path, response)
                with archive.open("wb") as sink:
                    for chunk in response.iter_bytes():
                        sink.write(chunk)
        except httpx.TransportError as exc:
            raise transport_error("GET", files_path, exc, base_url) from exc
        _unpack(archive, folder)
        return export_checkpoint(temp, out_dir, step=step, format=format, dtype=dtype)


def latest_step(base_url: str, api_key: str, model_id: str, *, timeout: float = 60.0) -> int:
    """The newest step of model `model_id` the server holds a checkpoint of."""
    if not wire.MODEL_ID.fullmatch(model_id):
        raise InvalidInputError(f"{model_id!r:.80} is not a model id of a training server")
    httpx = httpx_module()
    headers = {"Authorization": f"Bearer {api_key}"}
    with httpx.Client(
        base_url=base_url, headers=headers, timeout=timeout, verify=ssl_context()
    ) as client:
        path = f"{wire.MODELS_PATH}/{model_id}/checkpoints"
        return int(_get(client, path, base_url).json()["step"])


def _get(client: Any, path: str, base_url: str) -> Any:
    httpx = httpx_module()
    try:
        response = client.get(path)
    except httpx.TransportError as exc:
        raise transport_error("GET", path, exc, base_url) from exc
    raise_for_status("GET", path, response)
    return response


def _unpack(archive: Path, folder: Path) -> None:
    """The tar's regular files into `folder`; anything else (a path, a link) is refused."""
    with tarfile.open(archive, "r") as files:
        for member in files.getmembers():
            if not member.isfile() or "/" in member.name or member.name in ("", ".", ".."):
                raise CorruptDataError(
                    f"the server sent a checkpoint holding {member.name!r}, not a plain file"
                )
            source = files.extractfile(member)
            assert source is not None  # a regular file
            with source, (folder / member.name).open("wb") as sink:
                shutil.copyfileobj(source, sink)
