"""Where the tinker emulator keeps its checkpoints: plain folders under one root.

    root/runs/<quoted run id>/run.json                      base model, LoRA settings, tenant
    root/runs/<quoted run id>/weights/<name>/               save_state: adapter + optimizer
    root/runs/<quoted run id>/sampler_weights/<name>/       save_weights_for_sampler: adapter
    root/runs/<quoted run id>/external_weights/<name>/      save_weights_external: PEFT files

A checkpoint folder is complete once its `meta.json` exists (it is written last and the folder
renamed into place), so a listing never shows half a checkpoint. A checkpoint holds the adapter
(`adapter.safetensors`), the optimizer state of a save_state (`optimizer.pt`) and `meta.json`.

Durability (a SIGKILL at any point): a checkpoint is written into a temp folder (`.tmp-...`,
never listed), its files fsynced, then renamed into place; one being replaced or deleted is
first renamed aside, so a kill leaves the old checkpoint, the new one, or neither, never a
part of one. A new store removes the temp folders that processes no longer alive left behind.

`hold_point` is a test-only hook (`ARTHEX_TINKER_TEST_HOLD`): it lets a test kill the server at
a known point of a request, which timing alone cannot promise.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

from ....adapters.files import (
    TEMP_PREFIX,
    atomic_write_bytes,
    fsync_dir,
    fsync_file,
    temp_path_for,
)
from ..guard import OPEN_TENANT
from .base_model import LoraSettings
from .errors import CHECKPOINT_NAME, HttpError, UserError

if TYPE_CHECKING:
    import torch

ADAPTER_FILE = "adapter.safetensors"
OPTIMIZER_FILE = "optimizer.pt"
META_FILE = "meta.json"
KINDS = {"weights": "training", "sampler_weights": "sampler", "external_weights": "external"}
_PATH = re.compile(r"tinker://([^/]+)/([^/]+)/([^/]+)")
HOLD_ENV = "ARTHEX_TINKER_TEST_HOLD"
_TEMP_PID = re.compile(re.escape(TEMP_PREFIX) + r".*\.(\d+)\.[0-9a-f]+")


def hold_point(point: str) -> None:
    """Test-only: hold the calling thread for good at `point` when a test asks for it.

    When `$ARTHEX_TINKER_TEST_HOLD` names a folder that holds a file named `point`, the file is
    taken (so one request holds per file), `<point>.held` is written beside it, and the thread
    waits until the process dies: the test then kills the server there. The points:
    `"answer"` (a request's work has run, its answer is not yet given) and `"publish"` (a
    checkpoint's files are all written, its folder not yet renamed into place). Unset, as in
    any real service, it does nothing.
    """
    folder = os.environ.get(HOLD_ENV)
    if not folder:
        return
    try:
        (Path(folder) / point).unlink()
    except FileNotFoundError:
        return
    (Path(folder) / f"{point}.held").touch()
    threading.Event().wait()


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat()


def iso(timestamp: float) -> str:
    return dt.datetime.fromtimestamp(timestamp, dt.UTC).isoformat()


def run_metadata(body: Mapping[str, Any]) -> dict[str, str] | None:
    """A create request's `user_metadata`: strings to strings, the shape the SDK reads back in
    a training run (recipes keep their renderer's name there), or a 400."""
    value = body.get("user_metadata")
    if value is None:
        return None
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise HttpError(400, f"user_metadata must map strings to strings, got {value!r}")
    return dict(value)


def checkpoint_meta(base_model: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """What `meta.json` records of a save request (its TTL becomes `expires_at`)."""
    ttl = body.get("ttl_seconds")
    expires = None
    if isinstance(ttl, int) and ttl > 0:
        expires = (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=ttl)).isoformat()
    return {
        "time": now(),
        "base_model": base_model,
        "user_metadata": body.get("user_metadata"),
        "expires_at": expires,
    }


TTL_RANGE_S = (3600, 10 * 365 * 86400)  # what the service accepts for a checkpoint's TTL


class RunStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        sweep_temps(root)
        # How far the emulator's clock runs ahead of the machine's: a test moves it past a
        # checkpoint's TTL instead of waiting an hour.
        self.clock_offset_s = 0.0

    def _expired(self, directory: Path) -> bool:
        """Whether the checkpoint's TTL has passed; if so it is gone, as on the service."""
        try:
            expires = json.loads((directory / META_FILE).read_text()).get("expires_at")
        except (OSError, ValueError):
            return False
        if not expires:
            return False
        ahead = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=self.clock_offset_s)
        if dt.datetime.fromisoformat(expires) > ahead:
            return False
        remove_dir(directory)
        return True

    def set_ttl(self, path_run_id: str, segment: str, name: str, ttl: Any) -> None:
        """Set (an int of seconds from now) or clear (None) a checkpoint's TTL."""
        directory = self.checkpoint_dir(path_run_id, segment, name)
        if not (directory / META_FILE).is_file() or self._expired(directory):
            raise HttpError(404, f"no checkpoint {segment}/{name} in run {path_run_id}")
        if ttl is not None and (
            not isinstance(ttl, int) or not TTL_RANGE_S[0] <= ttl <= TTL_RANGE_S[1]
        ):
            raise HttpError(400, f"ttl_seconds must be between {TTL_RANGE_S} or null, got {ttl!r}")
        meta = json.loads((directory / META_FILE).read_text())
        ahead = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=self.clock_offset_s)
        meta["expires_at"] = (
            None if ttl is None else (ahead + dt.timedelta(seconds=ttl)).isoformat()
        )
        atomic_write_bytes(directory / META_FILE, json.dumps(meta, sort_keys=True).encode())

    def run_dir(self, run_id: str) -> Path:
        return self.root / "runs" / quote(run_id, safe="")

    def checkpoint_dir(self, run_id: str, segment: str, name: str) -> Path:
        return self.run_dir(run_id) / segment / name

    def write_run(
        self,
        run_id: str,
        base_model: str,
        lora: LoraSettings,
        session_id: str | None,
        user_metadata: dict[str, str] | None = None,
        *,
        tenant: str,
    ) -> None:
        record = {
            "run_id": run_id,
            "base_model": base_model,
            "lora": lora.to_json(),
            "session_id": session_id,
            "tenant": tenant,
            "created": now(),
            "user_metadata": user_metadata,
        }
        atomic_write_bytes(self.run_dir(run_id) / "run.json", json.dumps(record).encode())

    def run_record(self, run_id: str) -> dict[str, Any] | None:
        """The run's `run.json`, or None. A record from before tenants is the open tenant's
        (a server without keys)."""
        try:
            record = json.loads((self.run_dir(run_id) / "run.json").read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(record, dict):
            return None
        record.setdefault("tenant", OPEN_TENANT)
        return record

    def run_ids(self) -> list[str]:
        """The ids of the runs recorded here, oldest first."""
        folder = self.root / "runs"
        if not folder.is_dir():
            return []
        found = [(p.stat().st_mtime, unquote(p.parent.name)) for p in folder.glob("*/run.json")]
        return [run_id for _, run_id in sorted(found)]

    def read_run(self, run_id: str) -> tuple[str, LoraSettings] | None:
        """(base model, LoRA settings) of a run recorded here, or None."""
        try:
            record = json.loads((self.run_dir(run_id) / "run.json").read_text())
            return str(record["base_model"]), LoraSettings.from_json(record["lora"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def run_user_metadata(self, run_id: str) -> dict[str, str] | None:
        """The `user_metadata` a run was created with (recorded before it existed: None)."""
        try:
            record = json.loads((self.run_dir(run_id) / "run.json").read_text())
        except (OSError, ValueError):
            return None
        value = record.get("user_metadata")
        return dict(value) if isinstance(value, dict) else None

    def parse(self, path: str) -> tuple[str, str, str]:
        """`tinker://<run>/<segment>/<name>` -> (run, segment, name), or a 400."""
        match = _PATH.fullmatch(path)
        if match is None or match.group(2) not in KINDS:
            raise HttpError(
                400,
                f"{path!r} is not a tinker://<run>/weights|sampler_weights|external_weights/<name>",
            )
        run_id, segment, name = match.groups()
        return run_id, segment, name

    def existing(self, path: str) -> tuple[str, Path, str]:
        """(run id, folder, segment) of a saved checkpoint, or a 404."""
        run_id, segment, name = self.parse(path)
        directory = self.checkpoint_dir(run_id, segment, name)
        if not (directory / META_FILE).is_file() or self._expired(directory):
            raise HttpError(404, f"checkpoint {path} does not exist")
        return run_id, directory, segment

    def checkpoints(self, run_id: str) -> list[dict[str, Any]]:
        """The run's checkpoints as the REST API lists them, oldest first."""
        found = []
        for segment, kind in KINDS.items():
            folder = self.run_dir(run_id) / segment
            if not folder.is_dir():
                continue
            for entry in sorted(folder.iterdir()):
                if not CHECKPOINT_NAME.fullmatch(entry.name) or not (entry / META_FILE).is_file():
                    continue
                if self._expired(entry):
                    continue
                meta = json.loads((entry / META_FILE).read_text())
                found.append(
                    {
                        "checkpoint_id": f"{segment}/{entry.name}",
                        "checkpoint_type": kind,
                        "time": meta.get("time") or now(),
                        "tinker_path": f"tinker://{run_id}/{segment}/{entry.name}",
                        "size_bytes": folder_size(entry),
                        "public": False,
                        "user_metadata": meta.get("user_metadata"),
                        "expires_at": meta.get("expires_at"),
                    }
                )
        return sorted(found, key=lambda c: (c["time"], c["checkpoint_id"]))

    def delete(self, run_id: str, segment: str, name: str) -> None:
        directory = self.checkpoint_dir(run_id, segment, name)
        if segment not in KINDS or not CHECKPOINT_NAME.fullmatch(name) or not directory.is_dir():
            raise HttpError(404, f"no checkpoint {segment}/{name} in run {run_id}")
        remove_dir(directory)


# --- checkpoint folders -----------------------------------------------------------------


def publish_dir(directory: Path, write: Callable[[Path], None], meta: Mapping[str, Any]) -> None:
    """Fill a temp folder with `write(temp)` plus `meta.json`, then rename it into place."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    temp = temp_path_for(directory)
    temp.mkdir()
    try:
        write(temp)
        for path in temp.iterdir():
            fsync_file(path)
        atomic_write_bytes(temp / META_FILE, json.dumps(dict(meta), sort_keys=True).encode())
        hold_point("publish")
        if directory.exists():
            remove_dir(directory)
        os.replace(temp, directory)
        fsync_dir(directory.parent)
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def remove_dir(directory: Path) -> None:
    """Remove a checkpoint folder: renamed aside first, so a kill midway never leaves a folder
    that still looks complete with some of its files gone."""
    aside = temp_path_for(directory)
    try:
        os.replace(directory, aside)
    except FileNotFoundError:
        return
    fsync_dir(directory.parent)
    shutil.rmtree(aside, ignore_errors=True)


def sweep_temps(root: Path) -> None:
    """Remove the temp folders (and files) under `root/runs` of processes no longer alive:
    what a kill mid-save or mid-delete left. Those of live processes may be in use."""
    runs = root / "runs"
    if not runs.is_dir():
        return
    for run in runs.iterdir():
        for parent in (run, *(run / segment for segment in KINDS)):
            if not parent.is_dir():
                continue
            for entry in parent.iterdir():
                match = _TEMP_PID.fullmatch(entry.name)
                if match is None or _alive(int(match.group(1))):
                    continue
                if entry.is_dir():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: alive
        return True
    return True


def load_adapter(directory: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    path = directory / ADAPTER_FILE
    if not path.is_file():
        raise UserError(f"checkpoint {directory.name!r} holds no adapter weights")
    return dict(load_file(str(path)))


def save_adapter(
    directory: Path, adapter: Mapping[str, torch.Tensor], meta: Mapping[str, Any]
) -> None:
    from safetensors.torch import save_file

    def write(temp: Path) -> None:
        save_file(dict(adapter), str(temp / ADAPTER_FILE))

    publish_dir(directory, write, meta)


def folder_size(directory: Path) -> int:
    """The checkpoint's bytes (`meta.json` is the emulator's bookkeeping, not the checkpoint)."""
    return sum(p.stat().st_size for p in directory.iterdir() if p.is_file() and p.name != META_FILE)
