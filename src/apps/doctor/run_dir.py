"""A run directory's health: its history, trajectory files, checkpoints, lease and disk.

Each file is read by the code that reads it during a run: the history by the ledger's own
row parser (`jsonl_history.scan`), trajectory parts listed by the store's `list_parts` and
their version read from the footer key the store writes, checkpoints by the LocalBackend's
`complete_steps`, and the lease by `run_files.lease.lease_state`, which probes the lock
without taking it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from ...adapters import jsonl_history
from ...adapters.layout import HISTORY, LEASE, TINKER_RUN, TRAJECTORIES
from .check import Check, fail, ok, warn

DEFAULT_MORE_CHECKPOINTS = 5


def check_run_dir(path: Path, more_checkpoints: int = DEFAULT_MORE_CHECKPOINTS) -> list[Check]:
    """Every run-directory check, in the order they are printed."""
    history, steps = check_history(path)
    return [
        history,
        check_trajectories(path),
        check_checkpoints(path, steps),
        check_lease(path),
        check_disk(path, more_checkpoints),
    ]


def check_history(path: Path) -> tuple[Check, list[int]]:
    """The history parses: a torn last line (a write cut short) is a warning, since readers
    leave it out and the next append moves it aside; a damaged line before it is a failure,
    since every reader stops there. Also returns the steps the history names."""
    file = path / HISTORY
    try:
        scanned = jsonl_history.scan(file)
    except FileNotFoundError:
        return ok("history", f"no {HISTORY} yet (nothing logged)"), []
    except OSError as error:
        return fail("history", f"{file} cannot be read: {error}", "check its permissions"), []
    steps = sorted({row.step for row in scanned.rows})
    if scanned.damaged:
        named = ", ".join(f"line {n} ({why})" for n, why in scanned.damaged[:5])
        more = f" and {len(scanned.damaged) - 5} more" if len(scanned.damaged) > 5 else ""
        if scanned.torn_line is not None:
            more += f"; line {scanned.torn_line} is torn"
        return fail(
            "history",
            f"{file}: {len(scanned.damaged)} damaged line(s): {named}{more}",
            "repair or remove those lines by hand; readers stop at the first one",
        ), steps
    latest = f", steps {steps[0]}..{steps[-1]}" if steps else ""
    if scanned.torn_line is not None:
        return warn(
            "history",
            f"{file}: line {scanned.torn_line} is torn (a write cut short); "
            f"{len(scanned.rows)} rows read{latest}",
            f"nothing to do: readers leave it out and the next append moves it to "
            f"{HISTORY}{jsonl_history.TORN_SUFFIX}",
        ), steps
    return ok("history", f"{len(scanned.rows)} rows parse{latest}"), steps


def check_trajectories(path: Path) -> Check:
    """Every trajectory part under `trajectories/` opens as parquet and holds the layout
    version this arthex reads."""
    import pyarrow.fs as pafs

    from ...adapters.parquet.decoding import open_part
    from ...adapters.parquet.parts import list_parts
    from ...adapters.parquet.schema import FORMAT_VERSION, VERSION_KEY
    from ...core.errors import CorruptDataError

    folder = path / TRAJECTORIES
    if not folder.is_dir():
        return ok("trajectories", "none logged yet")
    parts = list_parts(pafs.LocalFileSystem(), str(folder))
    bad: list[str] = []
    for part in parts:
        name = f"{part.split}/{Path(part.path).name}"
        try:
            with open_part(part.path) as (file, _where):
                version = (file.schema_arrow.metadata or {}).get(VERSION_KEY)
        except (OSError, CorruptDataError):
            bad.append(f"{name} (not readable as parquet)")
            continue
        if version != str(FORMAT_VERSION).encode():
            found = "no version" if version is None else f"version {version.decode('latin-1')!r}"
            bad.append(f"{name} ({found}, this arthex reads {FORMAT_VERSION})")
    if bad:
        return fail(
            "trajectories",
            f"{len(bad)} of {len(parts)} file(s) cannot be read: {', '.join(bad[:5])}",
            f"move them out of {folder} (or upgrade arthex for a newer version)",
        )
    splits = sorted({part.split for part in parts})
    return ok(
        "trajectories", f"{len(parts)} file(s) of version {FORMAT_VERSION} ({', '.join(splits)})"
    )


def check_checkpoints(path: Path, steps: list[int]) -> Check:
    """The newest step the history names has its checkpoint (rollouts logged at step N were
    sampled from checkpoint N; retention deletes older ones, never the newest)."""
    from ...adapters.local import checkpoints as ckpt

    if (path / TINKER_RUN).is_file():
        return ok("checkpoints", f"kept on the Tinker service ({TINKER_RUN})")
    complete = ckpt.complete_steps(path)
    loose = sorted(set(ckpt.step_folders(path)) - set(complete))
    extra = f"; incomplete folder(s) {loose} (retention deletes them)" if loose else ""
    if not complete:
        if not steps:
            return ok("checkpoints", "none yet")
        return ok(
            "checkpoints",
            f"none in {path / 'checkpoints'} (a training server or Tinker keeps them){extra}",
        )
    newest = complete[-1]
    if steps and steps[-1] > newest:
        return fail(
            "checkpoints",
            f"the history names step {steps[-1]} but the newest complete checkpoint is "
            f"{newest}{extra}",
            f"the run resumes from step {newest}: restore the missing checkpoint, or expect "
            f"steps {newest + 1}..{steps[-1]} to be trained again",
        )
    return ok("checkpoints", f"{len(complete)} complete, newest {newest}{extra}")


def check_lease(path: Path) -> Check:
    from ...adapters.run_files.lease import lease_state

    file = path / LEASE
    state, holder = lease_state(file)
    who = holder.describe() if holder is not None else "a process starting up"
    if state == "free":
        return ok("lease", "no trainer holds the run")
    if state == "held":
        return ok("lease", f"held by a live trainer: {who}")
    if state == "stale":
        return warn(
            "lease",
            f"stale: {file} names {who}, which is gone",
            "nothing to do: the next trainer on this host takes it over",
        )
    return warn(
        "lease",
        f"{file} names {who}, another host: whether it still trains cannot be checked here",
        f"once that trainer is known to be gone, delete {file}",
    )


def check_disk(path: Path, more_checkpoints: int) -> Check:
    """Free disk for `more_checkpoints` more checkpoints the size of the newest one."""
    from ...adapters.local import checkpoints as ckpt

    free = shutil.disk_usage(path).free
    complete = ckpt.complete_steps(path)
    if not complete:
        return ok("disk", f"{gib(free)} free (no checkpoint here to size the next ones by)")
    each = _size(ckpt.step_dir(path, complete[-1]))
    needed = each * more_checkpoints
    what = f"{more_checkpoints} more checkpoint(s) of {gib(each)} need {gib(needed)}"
    if needed > free:
        return fail(
            "disk",
            f"{what}, {gib(free)} free",
            "free disk space, or delete old checkpoints (arthex prune --yes, or "
            "model.delete_checkpoints())",
        )
    return ok("disk", f"{what}; {gib(free)} free")


def _size(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file() and not f.is_symlink())


def gib(size: float) -> str:
    """Bytes as GiB, or MiB/KiB when small: `1.50 GiB`, `12.0 MiB`."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(size) >= scale:
            return f"{size / scale:.{2 if unit == 'GiB' else 1}f} {unit}"
    return f"{int(size)} B"
