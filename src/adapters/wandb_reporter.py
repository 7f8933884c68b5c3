"""WandbReporter: a best-effort mirror of the metrics ledger in a Weights & Biases run.

`history.jsonl` stays the authoritative record; this mirror exists so people can watch long,
paid runs. Rules it keeps:

- One wandb run per model, across every `train`/`log` call and across restarts: the run id is
  kept in `{root}/{project}/models/{name}/wandb-run.json` (written atomically) and every init
  resumes it with `resume="allow"`. A corrupt record logs one warning, starts a fresh run and
  is rewritten.
- `training_step` is the x-axis of every metric (`define_metric`) but fine-tuning's `sft/*`,
  charted against `sft/gradient_step` as ART does; rows are logged without
  `step=`, so an evaluation of an older step that arrives late is still charted and wandb never
  sees a step go backwards.
- Fail fast before paid work, degrade after: a missing SDK or missing credentials raise a
  clear error when the model is built (`check_ready()`), and the model `start`s the run before
  the first write of its first `log` or `train`, so a failing `wandb.init` fails that call
  while nothing is written (a retried call tries the init again). After that, any wandb
  failure, a later re-init included, logs one warning and the mirror goes quiet for the rest
  of the process; training, history.jsonl and the trajectory files never stop for it.

Offline use: set `WANDB_MODE=offline` (or pass `mode="offline"`); no credentials are needed.
The run is written under `{root}/{project}/models/{name}/wandb/offline-run-*/` (or under
`$WANDB_DIR/wandb/` when `WANDB_DIR` is set, or under `dir=`). Upload it later, oldest first,
from a machine with network access:

    wandb sync .art/my-project/models/my-model/wandb/offline-run-*

Each restart adds one more `offline-run-*` folder for the same run id; syncing them in order
resumes the one run. `WANDB_MODE=disabled` turns the mirror into a no-op.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import netrc
import os
import re
import secrets
import string
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ..core.errors import ArthexError, InvalidInputError, MissingExtraError
from ..core.identity import RunRef
from ..core.metrics import MetricsRow
from ..core.run_state import deep_merge
from ..core.sft import SFT_GRADIENT_STEP_KEY
from ..core.trajectories import TrajectoryGroup
from .files import atomic_write_bytes
from .layout import WANDB_RUN, RunLayout

if TYPE_CHECKING:
    from ..ports.metrics_reporter import (
        ConfigRecorder,
        MetricsReporter,
        SampleRecorder,
        Startable,
    )

logger = logging.getLogger("arthex.wandb")

RUN_RECORD = WANDB_RUN
X_AXIS = "training_step"
SFT_GLOB = "sft/*"
MODES = frozenset({"online", "offline", "dryrun", "shared", "disabled"})
_NO_CREDENTIAL_MODES = frozenset({"offline", "dryrun", "disabled"})
_DEFAULT_API_HOSTS = ("api.wandb.ai", "api.forge.coreweave.com")
_RUN_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_ID_ALPHABET = string.ascii_lowercase + string.digits
# A sample table cell holds one conversation; cap it so a pathological rollout cannot bloat
# the run (or this process) however long it is.
MAX_SAMPLE_CHARS = 20_000
# wandb would otherwise wrap this process's stdout/stderr: intrusive for a library, and one
# more thing that could break when wandb does. `settings={"console": "auto"}` turns it back on.
DEFAULT_SETTINGS: Mapping[str, Any] = {"console": "off"}


class WandbUnavailableError(ArthexError, RuntimeError):
    """wandb was asked for but cannot work: no credentials, or the run could not start."""


def _import_wandb() -> Any:
    try:
        return importlib.import_module("wandb")
    except ImportError as error:
        raise MissingExtraError("wandb", "wandb") from error


class WandbReporter:
    """Mirror metric rows, the run config and (optionally) a few sample trajectories to wandb.

    `root` is the base path (`.art`); `project` is the wandb project (default: the model's
    project); `mode` overrides `WANDB_MODE`; `settings` go to `wandb.Settings`; `dir` is where
    wandb writes its files (default: `$WANDB_DIR`, else the model's directory); `config` is
    recorded in every run's config; `sample_tables=N` logs a table of at most N trajectories
    per logged batch (0, the default, logs none).

    Without network: `WANDB_MODE=offline` (or `mode="offline"`) needs no credentials; upload
    later with `wandb sync {root}/{project}/models/{name}/wandb/offline-run-*`.

    Safe to share between tasks and across event loops: blocking SDK calls run in threads and
    the shared state is guarded by a thread lock, never a loop-bound asyncio primitive.
    """

    def __init__(
        self,
        root: str,
        *,
        entity: str | None = None,
        project: str | None = None,
        config: Mapping[str, Any] | None = None,
        mode: str | None = None,
        sample_tables: int = 0,
        dir: str | None = None,  # wandb's own name for it
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        if mode is not None and mode not in MODES:
            raise InvalidInputError(
                f"wandb mode {mode!r} is not one of {sorted(MODES)}; use 'offline' to log "
                "without network access and 'disabled' to turn the mirror off"
            )
        if isinstance(sample_tables, bool) or not isinstance(sample_tables, int):
            raise InvalidInputError(f"sample_tables must be an integer >= 0, got {sample_tables!r}")
        if sample_tables < 0:
            raise InvalidInputError(f"sample_tables must be an integer >= 0, got {sample_tables!r}")
        self._root = Path(root)
        self._entity = entity
        self._project = project
        self._base_config: dict[str, Any] = deep_merge({}, config or {})
        self._mode = mode
        self._sample_tables = sample_tables
        self._dir = dir
        self._settings: dict[str, Any] = {**DEFAULT_SETTINGS, **(settings or {})}
        self._runs: dict[RunRef, Any] = {}
        self._configs: dict[RunRef, dict[str, Any]] = {}
        self._defined: dict[RunRef, set[str]] = {}
        self._resumed: dict[RunRef, bool] = {}
        self._quiet = False
        self._state_lock = threading.Lock()  # short sections: dict updates only
        self._init_lock = threading.Lock()  # one wandb.init at a time, in a worker thread

    # -- readiness ---------------------------------------------------------------------------

    def mode(self) -> str:
        """The mode in effect: `mode=` if given, else `WANDB_MODE`, else online."""
        mode = (self._mode or os.environ.get("WANDB_MODE") or "online").strip().lower()
        return "offline" if mode == "dryrun" else mode

    def check_ready(self) -> None:
        """Raise now, before any training work, if wandb cannot work when the first row comes.

        MissingExtraError when the SDK is not installed; WandbUnavailableError when no
        credentials are found in online mode (offline and disabled modes need none).
        """
        _import_wandb()
        if self.mode() in _NO_CREDENTIAL_MODES:
            return
        if not has_credentials():
            raise WandbUnavailableError(
                "wandb is enabled but no credentials were found (no WANDB_API_KEY and no netrc "
                f"entry for {' or '.join(_api_hosts())}). Run `wandb login` or set "
                "WANDB_API_KEY; or set WANDB_MODE=offline to log locally and upload later with "
                "`wandb sync <run dir>`; or leave wandb out of report_metrics."
            )

    # -- the port --------------------------------------------------------------------------

    async def start(self, run: RunRef) -> None:
        """Start (or resume) the run now. Raises WandbUnavailableError when it cannot start;
        nothing is remembered of the failure, so the next `start` tries again."""
        if self._quiet or self.mode() == "disabled" or run in self._runs:
            return
        await asyncio.to_thread(self._open_run, run)

    async def report(self, run: RunRef, row: MetricsRow) -> None:
        """Log `row` with `training_step` as its x-axis; None values are left out (a gap)."""
        handle = await self._live_run(run)
        if handle is None:
            return
        payload: dict[str, Any] = {X_AXIS: row.step}
        payload.update((key, value) for key, value in row.values.items() if value is not None)
        self._guarded(lambda: self._log(run, handle, payload))

    async def report_samples(
        self, run: RunRef, split: str, step: int, groups: Sequence[TrajectoryGroup]
    ) -> None:
        """Log a table of at most `sample_tables` trajectories (one per group in turn) as
        `{split}/samples` at `step`. A fresh table per call: nothing accumulates in memory."""
        if self._sample_tables <= 0:
            return
        rows = sample_rows(groups, self._sample_tables)
        if not rows:
            return
        handle = await self._live_run(run)
        if handle is None:
            return

        def send() -> None:
            wandb = _import_wandb()
            table = wandb.Table(columns=list(SAMPLE_COLUMNS), data=rows)
            self._log(run, handle, {X_AXIS: step, f"{split}/samples": table})

        self._guarded(send)

    def update_config(self, run: RunRef, config: Mapping[str, Any]) -> None:
        """Deep-merge `config` into the run's config: sent at init, or to the live run now.
        A later value for a key replaces the earlier one (a new training config wins)."""
        with self._state_lock:
            self._configs[run] = deep_merge(self._configs.get(run, {}), config)
            handle = self._runs.get(run)
            full = deep_merge(self._base_config, self._configs[run])
            changed = {key: full[key] for key in config}
        if handle is not None and not self._quiet:
            self._guarded(lambda: handle.config.update(changed, allow_val_change=True))

    async def close(self) -> None:
        """Flush and finish every run this reporter opened; harmless to call twice. A later
        `report` resumes the same run."""
        with self._state_lock:
            handles = list(self._runs.values())
            self._runs.clear()
            self._defined.clear()
        for handle in handles:
            # Finish even a quiet mirror's runs: it releases wandb's service and flushes what
            # was logged before the failure.
            await asyncio.to_thread(self._guarded, handle.finish, True)

    # -- introspection -------------------------------------------------------------------

    def record_path(self, run: RunRef) -> Path:
        return RunLayout.of(self._root, run).wandb_run

    def resumed(self, run: RunRef) -> bool:
        """Whether this process's run for `run` reuses an id recorded by an earlier one."""
        return self._resumed.get(run, False)

    @property
    def quiet(self) -> bool:
        """True once a wandb failure has turned the mirror off for the rest of the process."""
        return self._quiet

    # -- internals -------------------------------------------------------------------------

    async def _live_run(self, run: RunRef) -> Any | None:
        """The run to log to; None when the mirror is off. A run that was never started (or
        was closed) is started here, and a failure to start it only turns the mirror off."""
        if self._quiet or self.mode() == "disabled":
            return None
        handle = self._runs.get(run)
        if handle is None:
            opened: list[Any] = []
            await asyncio.to_thread(self._guarded, lambda: opened.append(self._open_run(run)))
            handle = opened[0] if opened else None
        return handle

    def _open_run(self, run: RunRef) -> Any | None:
        with self._init_lock:
            if self._quiet:
                return None
            if run in self._runs:
                return self._runs[run]
            wandb = _import_wandb()
            self.check_ready()
            run_id, resumed = self._run_id(run)
            with self._state_lock:
                sent_config = deep_merge(self._base_config, self._configs.get(run, {}))
            handle = None
            try:
                handle = wandb.init(**self._init_kwargs(wandb, run, run_id, sent_config))
                handle.define_metric(X_AXIS)
                handle.define_metric("*", step_metric=X_AXIS)
            except Exception as error:
                failure = WandbUnavailableError(
                    f"wandb could not start run {run_id!r} for model {run} "
                    f"({type(error).__name__}: {error}). Check the network and credentials, or "
                    "set WANDB_MODE=offline to log locally and `wandb sync` later."
                )
                if handle is not None:
                    try:
                        handle.finish(exit_code=1)
                    except Exception:
                        logger.debug("finishing a half-started wandb run failed", exc_info=True)
                raise failure from error
            with self._state_lock:
                self._runs[run] = handle
                self._defined[run] = {X_AXIS, "*"}
                self._resumed[run] = resumed
                current = deep_merge(self._base_config, self._configs.get(run, {}))
            late = {key: value for key, value in current.items() if sent_config.get(key) != value}
            if late:  # update_config ran while init was in flight
                self._guarded(lambda: handle.config.update(late, allow_val_change=True))
            return handle

    def _init_kwargs(
        self, wandb: Any, run: RunRef, run_id: str, config: Mapping[str, Any]
    ) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "id": run_id,
            "name": run.name,
            "project": self._project or run.project,
            "entity": self._entity,
            "config": dict(config) or None,
            "resume": "allow",
            # One run per model, several models per process, and never the user's own run.
            "reinit": "create_new",
            "settings": wandb.Settings(**self._settings),
        }
        # Always explicit: the SDK caches WANDB_MODE at its first use in a process, and the
        # credential check above must judge the mode the run will really use.
        kwargs["mode"] = self.mode()
        directory = self._dir or os.environ.get("WANDB_DIR") or str(self.record_path(run).parent)
        Path(directory).mkdir(parents=True, exist_ok=True)
        kwargs["dir"] = directory
        return kwargs

    def _run_id(self, run: RunRef) -> tuple[str, bool]:
        """The recorded id and True, or a fresh id (recorded now, before init) and False."""
        path = self.record_path(run)
        try:
            record = json.loads(path.read_bytes())
            run_id = record["run_id"]
            if not isinstance(run_id, str) or _RUN_ID.fullmatch(run_id) is None:
                raise ValueError(f"run_id {run_id!r} is not a wandb run id")
            return run_id, True
        except (FileNotFoundError, NotADirectoryError):
            pass  # no record yet: a new run
        except OSError as error:
            raise WandbUnavailableError(
                f"cannot read the wandb run record {path} ({error}); fix its permissions, or "
                "delete it to start a fresh wandb run"
            ) from error
        except (ValueError, KeyError, TypeError) as error:
            logger.warning(
                "%s is corrupt (%s); starting a fresh wandb run for %s and rewriting it",
                path,
                error,
                run,
            )
        run_id = "".join(secrets.choice(_ID_ALPHABET) for _ in range(12))
        record = {
            "run_id": run_id,
            "project": self._project or run.project,
            "entity": self._entity,
            "created_at": datetime.now(UTC).isoformat(),
        }
        try:
            atomic_write_bytes(path, json.dumps(record, indent=2).encode() + b"\n")
        except OSError as error:
            raise WandbUnavailableError(
                f"cannot record the wandb run id for {run} at {path} ({error}); without it a "
                "restart could not resume the run. Make the model directory writable."
            ) from error
        return run_id, False

    def _log(self, run: RunRef, handle: Any, payload: Mapping[str, Any]) -> None:
        defined = self._defined.setdefault(run, {X_AXIS, "*"})
        for key in payload:
            # "*" already covers every key; naming each section too keeps the x-axis right on
            # servers and UIs whose glob does not cross '/'.
            section, slash, _ = key.partition("/")
            glob = f"{section}/*" if slash else key
            if glob not in defined:
                if glob == SFT_GLOB:  # ART's axis for fine-tuning's per-gradient-step rows
                    handle.define_metric(SFT_GRADIENT_STEP_KEY)
                    handle.define_metric(glob, step_metric=SFT_GRADIENT_STEP_KEY)
                else:
                    handle.define_metric(glob, step_metric=X_AXIS)
                defined.add(glob)
        handle.log(dict(payload))

    def _guarded(self, call: Callable[[], object], even_if_quiet: bool = False) -> None:
        """Run one SDK call; the first failure warns once and turns the mirror off."""
        if self._quiet and not even_if_quiet:
            return
        try:
            call()
        except Exception as error:
            with self._state_lock:
                first = not self._quiet
                self._quiet = True
            if first:
                logger.warning(
                    "wandb failed (%s: %s); the wandb mirror is off for the rest of this "
                    "process. Training, history.jsonl and the trajectory files are unaffected.",
                    type(error).__name__,
                    error,
                )


# -- credentials -----------------------------------------------------------------------------


def _api_hosts() -> tuple[str, ...]:
    base_url = os.environ.get("WANDB_BASE_URL")
    if base_url:
        host = urlsplit(base_url).netloc
        return (host,) if host else _DEFAULT_API_HOSTS
    return _DEFAULT_API_HOSTS


def _netrc_path() -> Path:
    explicit = os.environ.get("NETRC")
    if explicit:
        return Path(explicit).expanduser()
    for candidate in ("~/.netrc", "~/_netrc"):
        path = Path(candidate).expanduser()
        if path.exists():
            return path
    return Path("~/.netrc").expanduser()


def has_credentials() -> bool:
    """WANDB_API_KEY, an identity token file, or a `wandb login` entry in the netrc file.

    Read without the SDK on purpose: its login helper may reach for the network, and this check
    must stay instant and offline.
    """
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    try:
        entries = netrc.netrc(str(_netrc_path()))
    except (OSError, netrc.NetrcParseError):
        return False
    for host in _api_hosts():
        found = entries.authenticators(host)
        if found is not None and found[2]:
            return True
    return False


# -- sample tables ---------------------------------------------------------------------------

SAMPLE_COLUMNS = ("group_index", "trajectory_index", "reward", "messages", "metrics")


def sample_rows(groups: Sequence[TrajectoryGroup], limit: int) -> list[list[Any]]:
    """At most `limit` rows, taking one trajectory from each group in turn, so every scenario
    shows up before any shows twice."""
    rows: list[list[Any]] = []
    depth = 0
    while len(rows) < limit:
        added = False
        for group_index, group in enumerate(groups):
            if depth < len(group.trajectories) and len(rows) < limit:
                trajectory = group.trajectories[depth]
                text = "\n".join(
                    f"{message.get('role', '?')}: {message.get('content', '')}"
                    for message in trajectory.messages()
                )
                rows.append(
                    [
                        group_index,
                        depth,
                        trajectory.reward,
                        text[:MAX_SAMPLE_CHARS],
                        json.dumps(trajectory.metrics, sort_keys=True),
                    ]
                )
                added = True
        if not added:
            break
        depth += 1
    return rows


if TYPE_CHECKING:
    _fits: type[MetricsReporter] = WandbReporter
    _records_config: type[ConfigRecorder] = WandbReporter
    _records_samples: type[SampleRecorder] = WandbReporter
    _starts: type[Startable] = WandbReporter
