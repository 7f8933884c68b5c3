"""The tinker emulator's external weights: `save_weights_external` writes a training run's LoRA
adapter in the Hugging Face PEFT format, and `external_weights_urls` hands out signed, expiring
URLs to its files, served by `GET /files/...` without the API key (the signature is the key).

    runs/<run id>/external_weights/<name>/adapter_model.safetensors   PEFT's tensor names
    runs/<run id>/external_weights/<name>/adapter_config.json         PEFT's LoraConfig, with
                                                                       the run's base model
    runs/<run id>/external_weights/<name>/meta.json                   the emulator's own

A URL is `/files/<run>/<name>/<file>?expires=<unix s>&signature=<hmac>`; past its expiry it is
answered 403, as a store's signed URL is. `faults` lets a test make the next signed URLs expire
at once or the next downloads come back cut short.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

import attrs

from .errors import FILES_PREFIX, HttpError, UserError, checkpoint_name
from .store import META_FILE, RunStore, checkpoint_meta, publish_dir
from .training_runs import TrainingRuns
from .wire import Reply

SEGMENT = "external_weights"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"


@attrs.define
class DownloadFaults:
    """Faults a test asks for: the next `expired_signings` URL sets are issued already expired;
    the next `truncated_downloads` file downloads send only the first half of the file."""

    expired_signings: int = 0
    truncated_downloads: int = 0


@attrs.define
class ExternalWeights:
    _store: RunStore
    _runs: TrainingRuns
    url_ttl_s: float = 3600.0
    faults: DownloadFaults = attrs.Factory(DownloadFaults)
    _secret: bytes = attrs.Factory(lambda: secrets.token_bytes(32))

    def save(self, body: dict[str, Any], tenant: str) -> Reply:
        run = self._runs.live(body.get("model_id"), tenant)
        name = checkpoint_name(body.get("path"))
        self._runs.admit_save(run)
        directory = self._store.checkpoint_dir(run.run_id, SEGMENT, name)
        path = f"tinker://{run.run_id}/{SEGMENT}/{name}"

        def work() -> Reply:
            if directory.exists():
                raise UserError(f"external weights {path} already exist; use a new name")
            trainer = run.trainer
            config = trainer.model.peft_config["default"].to_dict()
            config["base_model_name_or_path"] = run.base_model
            text = json.dumps(config, default=_json_value, sort_keys=True, indent=2)

            def write(temp: Any) -> None:
                from safetensors.torch import save_file

                save_file(trainer.adapter(), str(temp / ADAPTER_WEIGHTS))
                (temp / ADAPTER_CONFIG).write_text(text)

            publish_dir(directory, write, checkpoint_meta(run.base_model, body))
            size = sum(p.stat().st_size for p in directory.iterdir() if p.name != META_FILE)
            return Reply.json({"type": "save_weights_external", "path": path, "size_bytes": size})

        return self._runs.queue(run, body.get("seq_id"), work)

    def urls(self, run_id: str, name: str, headers: Mapping[str, str], tenant: str) -> Reply:
        self._runs.get(run_id, tenant)
        directory = self._store.checkpoint_dir(run_id, SEGMENT, name)
        if not (directory / META_FILE).is_file():
            raise HttpError(404, f"no external weights {name!r} in run {run_id}")
        expires = time.time() + self.url_ttl_s
        if self.faults.expired_signings > 0:
            self.faults.expired_signings -= 1
            expires = time.time() - 1.0
        stamp = int(expires)
        host = headers.get("host", "127.0.0.1")
        urls = {}
        for file in sorted(p.name for p in directory.iterdir() if p.name != META_FILE):
            target = f"{quote(run_id, safe='')}/{name}/{file}"
            signature = self._sign(target, stamp)
            urls[file] = (
                f"http://{host}{FILES_PREFIX}{target}?expires={stamp}&signature={signature}"
            )
        from .store import iso

        return Reply.json({"urls": urls, "expires": iso(stamp)})

    def download(self, target: str) -> Reply:
        parts = urlsplit(target)
        query = parse_qs(parts.query)
        relative = parts.path[len(FILES_PREFIX) :]
        try:
            stamp = int(query["expires"][0])
            signature = query["signature"][0]
        except (KeyError, ValueError, IndexError):
            raise HttpError(403, "the URL carries no valid signature") from None
        if not hmac.compare_digest(signature, self._sign(relative, stamp)):
            raise HttpError(403, "the URL's signature does not match")
        if time.time() > stamp:
            raise HttpError(403, "Request has expired")
        run_quoted, _, rest = relative.partition("/")
        name, _, file = rest.partition("/")
        path = self._store.checkpoint_dir(unquote(run_quoted), SEGMENT, name) / file
        if file in ("", META_FILE) or "/" in file or not path.is_file():
            raise HttpError(404, f"no file {relative!r}")
        data = path.read_bytes()
        if self.faults.truncated_downloads > 0:
            self.faults.truncated_downloads -= 1
            data = data[: len(data) // 2]
        return Reply(200, data, "application/octet-stream")

    def _sign(self, target: str, stamp: int) -> str:
        message = f"{target}\n{stamp}".encode()
        return hmac.new(self._secret, message, hashlib.sha256).hexdigest()


def _json_value(value: object) -> object:
    if isinstance(value, set | frozenset):
        return sorted(value)
    return str(value)
