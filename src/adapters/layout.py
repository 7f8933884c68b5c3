"""RunLayout: the one spelling of a run's directory, its files and the markers that say a folder
is a run. Torch-free and I/O-free (but for `find_runs` and `is_run_dir`, which look).

    {base}/{project}/models/{name}/
        model.json  history.jsonl  trajectories/{split}/{step:04d}.parquet  checkpoints/{step:04d}/
        state.json  pipeline_state.json  trainer.lease  wandb-run.json  tinker-run.json
        diagnostics/hang-{time}.txt

Every adapter, app and tool that touches a run directory asks this class where things are, so
the layout (ART's) is written down once. `base` is a local folder or, for the stores that
accept one, a filesystem URI (`s3://bucket/runs`); `dir`/`file` are for local folders,
`uri`/`uri_of` for either.
"""

from __future__ import annotations

from pathlib import Path

import attrs

from ..core.errors import InvalidInputError
from ..core.identity import ModelSpec, RunRef

MODELS = "models"
HISTORY = "history.jsonl"
MODEL_SPEC = "model.json"
TRAJECTORIES = "trajectories"
CHECKPOINTS = "checkpoints"
STATE = "state.json"
PIPELINE_STATE = "pipeline_state.json"
LEASE = "trainer.lease"
WANDB_RUN = "wandb-run.json"
WANDB_DIR = "wandb"
TINKER_RUN = "tinker-run.json"
DIAGNOSTICS = "diagnostics"  # the hang watchdog's reports: diagnostics/hang-{time}.txt
# Any of these makes a folder a run (an ART run may have only some of them).
MARKERS = (HISTORY, MODEL_SPEC, TRAJECTORIES, CHECKPOINTS)


@attrs.frozen
class RunLayout:
    """Where the files of `run` live under `base`."""

    base: str = attrs.field(converter=str)
    run: RunRef

    @classmethod
    def of(cls, base: str | Path, run: RunRef) -> RunLayout:
        return cls(str(base), run)

    # -- the directory ------------------------------------------------------------------------

    @property
    def uri(self) -> str:
        """The run directory as a string under `base` (a local path or a URI)."""
        return f"{self.base.rstrip('/')}/{self.run.project}/{MODELS}/{self.run.name}"

    def uri_of(self, *parts: str) -> str:
        return "/".join([self.uri, *parts])

    @property
    def dir(self) -> Path:
        """The run directory on the local filesystem (the names were validated as segments)."""
        return Path(self.base) / self.run.project / MODELS / self.run.name

    def file(self, name: str) -> Path:
        return self.dir / name

    # -- its files --------------------------------------------------------------------------

    @property
    def history(self) -> Path:
        return self.file(HISTORY)

    @property
    def state(self) -> Path:
        return self.file(STATE)

    @property
    def pipeline_state(self) -> Path:
        return self.file(PIPELINE_STATE)

    @property
    def lease(self) -> Path:
        return self.file(LEASE)

    @property
    def wandb_run(self) -> Path:
        return self.file(WANDB_RUN)

    @property
    def checkpoints(self) -> Path:
        return self.file(CHECKPOINTS)

    def checkpoint(self, step: int) -> Path:
        return self.checkpoints / step_name(step)

    @property
    def diagnostics(self) -> Path:
        return self.file(DIAGNOSTICS)

    def diagnostic(self, name: str) -> Path:
        """A report of the run's diagnostics (`hang-{time}.txt`); `name` is one segment."""
        if not name or "/" in name or "\\" in name or name in (".", ".."):
            raise ValueError(f"a diagnostics file name is one path segment, got {name!r}")
        return self.diagnostics / name


def backend_run_dir(spec: ModelSpec, path: str | None, backend: str) -> Path:
    """Where a backend keeps `spec`'s run: under the model's `base_path`, the one place a run
    lives (its trajectories, ledger and trainer lease are there, so its checkpoints are too).
    A backend's own `path` (ART's spelling of that place) may only agree: InvalidInputError
    naming both otherwise, before anything is written."""
    if path is not None and Path(path).resolve() != Path(spec.base_path).resolve():
        raise InvalidInputError(
            f"{backend}(path={path!r}) names another place for {spec.run} than the model's "
            f"base_path {spec.base_path!r}: a run lives in one directory, the model's "
            f"base_path; pass base_path={path!r} to the model, or leave path out"
        )
    return RunLayout.of(spec.base_path, spec.run).dir


def step_name(step: int) -> str:
    """`0007`: how a step names its checkpoint folder and its trajectory file (ART's width)."""
    return f"{step:04d}"


def is_step_name(name: str) -> bool:
    """A folder or file stem that names a step (`0007`, `12345`); ART reads only these."""
    return name.isascii() and name.isdigit()


# -- finding runs on disk ---------------------------------------------------------------------


def is_run_dir(path: Path) -> bool:
    return path.is_dir() and any((path / marker).exists() for marker in MARKERS)


def find_runs(base: Path) -> list[Path]:
    """Every run directory `{base}/{project}/models/{name}`, sorted by project, name."""
    if not base.is_dir():
        return []
    return sorted(p for p in base.glob(f"*/{MODELS}/*") if is_run_dir(p))


def parse_run_dir(path: Path) -> tuple[Path, RunRef] | None:
    """`(base, run)` of a run directory in the standard layout, else None."""
    if path.parent.name != MODELS:
        return None
    try:
        run = RunRef(project=path.parent.parent.name, name=path.name)
    except ValueError:
        return None
    return path.parent.parent.parent, run


def run_label(path: Path) -> str:
    """`project/name` of a run directory in the standard layout, else its path."""
    parsed = parse_run_dir(path)
    return f"{parsed[1].project}/{parsed[1].name}" if parsed else str(path)
