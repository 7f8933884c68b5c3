"""The Python that runs ART's own code: a venv with openpipe-art 0.5.23, pyarrow and duckdb,
built once and cached, and a way to run ART scripts in it.

ART 0.5.23 needs Python >= 3.12, which arthex does not. The interpreter is looked for on PATH
(`python3.12` ... `python3.19`, `python3`) and under pyenv's versions; each candidate is run
once to learn its version (a pyenv shim for a version that is not selected fails, and is
skipped). With none found the suite fails and says what to install; it never skips.

The venv lives in `~/.cache/arthex-interop/<key>/` (or `$ARTHEX_INTEROP_CACHE/<key>/`), the
key a hash of the requirements and the interpreter's version, so a change to either builds a
new one. Builders take a lock, so two test sessions never build the same venv at once, and a
venv counts only once its `ready` marker is written (a build that died is started over).
`ARTHEX_INTEROP_PYTHON` names an interpreter that already has the requirements, skipping all
of this (for development).
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import importlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import pytest

from arthex.adapters.files import exclusive_lock

ART_VERSION = "0.5.23"
REQUIREMENTS = (f"openpipe-art=={ART_VERSION}", "pyarrow>=15", "duckdb>=1.0")
MIN_VERSION = (3, 12)
SCRIPTS = Path(__file__).parent / "art"
BUILD_TIMEOUT_S = 1800


def python_version(executable: str) -> tuple[int, int] | None:
    """(major, minor) of an interpreter that runs, else None."""
    try:
        done = subprocess.run(
            [executable, "-c", "import sys; print(*sys.version_info[:2])"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    parts = done.stdout.split()
    if done.returncode != 0 or len(parts) != 2:
        return None
    return int(parts[0]), int(parts[1])


def _pyenv_root() -> str:
    if shutil.which("pyenv"):
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            done = subprocess.run(["pyenv", "root"], capture_output=True, text=True, timeout=30)
            if done.returncode == 0 and done.stdout.strip():
                return done.stdout.strip()
    return os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))


def candidates() -> list[str]:
    found = [shutil.which(f"python3.{minor}") for minor in range(12, 20)]
    found.append(shutil.which("python3"))
    found += sorted(glob.glob(f"{_pyenv_root()}/versions/*/bin/python3.1[2-9]"))
    unique: list[str] = []
    for path in found:
        if path and path not in unique:
            unique.append(path)
    return unique


def find_python() -> tuple[str, tuple[int, int]]:
    """The lowest Python >= 3.12 found (ART is released for 3.12 first), or a failed test."""
    seen = [(path, python_version(path)) for path in candidates()]
    usable = [(version, path) for path, version in seen if version and version >= MIN_VERSION]
    if not usable:
        tried = ", ".join(
            f"{p} ({'.'.join(map(str, v)) if v else 'does not run'})" for p, v in seen
        )
        pytest.fail(
            "the interop suite runs ART's own code, and openpipe-art "
            f"{ART_VERSION} needs Python >= 3.12, but none was found (looked for python3.12 .. "
            f"python3.19 and python3 on PATH, and {_pyenv_root()}/versions/*/bin/python3.1[2-9]; "
            f"tried: {tried or 'nothing'}). Install one (e.g. `pyenv install 3.12`) or set "
            "ARTHEX_INTEROP_PYTHON to an interpreter that has "
            f"{', '.join(REQUIREMENTS)}",
            pytrace=False,
        )
    version, path = min(usable)
    return path, version


def cache_root() -> Path:
    given = os.environ.get("ARTHEX_INTEROP_CACHE")
    return Path(given) if given else Path.home() / ".cache" / "arthex-interop"


def art_python() -> Path:
    """The interpreter of a venv that has ART; built on first use."""
    given = os.environ.get("ARTHEX_INTEROP_PYTHON")
    if given:
        _check(Path(given))
        return Path(given)
    base, version = find_python()
    key = hashlib.sha256(json.dumps([REQUIREMENTS, version]).encode()).hexdigest()[:16]
    return cached_venv(key, base, REQUIREMENTS, _check, "the interop venv")


def cached_venv(
    key: str,
    base: str,
    requirements: Sequence[str],
    check: Callable[[Path], None] | None,
    what: str,
    timeout: float = BUILD_TIMEOUT_S,
    *,
    installer: Literal["pip", "uv"] = "pip",
) -> Path:
    """The interpreter of the venv `key` under the cache root: built once with `base`'s venv
    module and pip (or with uv: `installer="uv"`, several times faster for a venv of many GB),
    checked by `check`, then marked ready; processes that race for it wait on its lock. A
    failed step fails the test with its output."""
    venv = cache_root() / key
    cache_root().mkdir(parents=True, exist_ok=True)
    with exclusive_lock(cache_root() / f"{key}.lock"):
        if not (venv / "ready").is_file():
            shutil.rmtree(venv, ignore_errors=True)
            _build(base, venv, requirements, check, what, timeout, installer)
    return venv / "bin" / "python"


def keyed_venv(
    name: str,
    requirements: Sequence[str],
    check: Callable[[Path], None],
    *,
    given_by: str,
    what: str,
    timeout: float,
) -> Path:
    """The interpreter of the uv-built venv `{name}-{digest of requirements and Python}` under
    the cache root (cached_venv); the environment variable `given_by` may name an interpreter
    that already has the requirements (checked), skipping the build (for development)."""
    given = os.environ.get(given_by)
    if given:
        check(Path(given))
        return Path(given)
    base, version = find_python()
    digest = hashlib.sha256(json.dumps([name, requirements, version]).encode()).hexdigest()[:16]
    return cached_venv(f"{name}-{digest}", base, requirements, check, what, timeout, installer="uv")


def checkout_pyroot(tmp: Path) -> Path:
    """A directory under `tmp` where `import arthex` finds this checkout's src/, for a venv
    that does not install arthex (PYTHONPATH)."""
    root = tmp / "pyroot"
    root.mkdir(exist_ok=True)
    link = root / "arthex"
    if not link.exists():
        link.symlink_to(Path(__file__).resolve().parents[2] / "src", target_is_directory=True)
    return root


def _build(
    base: str,
    venv: Path,
    requirements: Sequence[str],
    check: Callable[[Path], None] | None,
    what: str,
    timeout: float,
    installer: Literal["pip", "uv"],
) -> None:
    python = str(venv / "bin" / "python")
    if installer == "uv":
        uv = _uv()
        steps = [
            [uv, "venv", "--quiet", "--python", base, str(venv)],
            [uv, "pip", "install", "--quiet", "--python", python, *requirements],
        ]
        listing = [uv, "pip", "freeze", "--python", python]
    else:
        steps = [
            [base, "-m", "venv", str(venv)],
            [python, "-m", "pip", "install", "--disable-pip-version-check", "--quiet",
             *requirements],
        ]  # fmt: skip
        listing = [python, "-m", "pip", "freeze"]
    for command in steps:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            pytest.fail(
                f"building {what} in {venv} failed at `{' '.join(command)}` "
                f"(exit {done.returncode}):\n{(done.stdout + done.stderr)[-4000:]}",
                pytrace=False,
            )
    if check is not None:
        check(venv / "bin" / "python")
    freeze = subprocess.run(listing, capture_output=True, text=True)
    (venv / "ready").write_text(freeze.stdout)


def _uv() -> str:
    """uv's executable, from the `uv` package of the dev extra."""
    try:
        from uv import find_uv_bin
    except ImportError:
        pytest.fail(
            "building this venv needs uv, which the dev extra installs (pip install -e '.[dev]')",
            pytrace=False,
        )
    return str(find_uv_bin())


def _check(python: Path) -> None:
    done = subprocess.run(
        [str(python), "-c",
         "import importlib.metadata as m, pyarrow, duckdb; print(m.version('openpipe-art'))"],
        capture_output=True, text=True, timeout=120, env=art_environment(),
    )  # fmt: skip
    if done.returncode != 0 or done.stdout.strip() != ART_VERSION:
        pytest.fail(
            f"{python} does not have openpipe-art=={ART_VERSION}, pyarrow and duckdb: "
            f"{(done.stdout + done.stderr)[-2000:]}",
            pytrace=False,
        )


def art_environment(tz: str | None = None) -> dict[str, str]:
    """The environment of an ART process: none of arthex's Python settings, nothing reaching
    the network (LiteLLM's cost map is read from its package, wandb and weave are off)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.update(
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        WANDB_MODE="disabled",
        WANDB_SILENT="true",
        WEAVE_DISABLED="true",
        HF_HUB_OFFLINE="1",
        PYTHONNOUSERSITE="1",
        PYTHONDONTWRITEBYTECODE="1",
    )
    if tz is not None:
        env["TZ"] = tz
    return env


def run_art(python: Path, tasks: list[dict[str, Any]], cwd: Path, tz: str) -> list[Any]:
    """Run ART's code on each task (see art/driver.py) in one process; their results."""
    out = cwd / f"art-results-{os.getpid()}-{len(tasks)}.json"
    payload = json.dumps({"tasks": tasks, "out": str(out)})
    done = subprocess.run(
        [str(python), str(SCRIPTS / "driver.py")],
        input=payload, capture_output=True, text=True, cwd=cwd, timeout=900,
        env=art_environment(tz),
    )  # fmt: skip
    if done.returncode != 0:
        pytest.fail(f"ART's driver failed (exit {done.returncode}):\n{done.stderr[-6000:]}")
    results: list[Any] = json.loads(out.read_text())
    out.unlink()
    return results


def art_outcome(script: str, cases: Any, timeout_s: float = 300) -> Any:
    """The outcome of `art/{script}.py` (its `run(lib, cases)`) under ART, in ART's venv: the
    last line the script prints (ART may print notes before it), as JSON."""
    done = subprocess.run(
        [str(art_python()), str(SCRIPTS / f"{script}.py"), "art"],
        input=json.dumps(cases), capture_output=True, text=True, env=art_environment(),
        timeout=timeout_s,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-6000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def arthex_outcome(script: str, cases: Any) -> Any:
    """The outcome of the same script under `arthex.art`, in this process, through JSON."""
    sys.path.insert(0, str(SCRIPTS))
    try:
        run = importlib.import_module(script).run
    finally:
        sys.path.remove(str(SCRIPTS))
    return json.loads(json.dumps(run("arthex.art", cases)))


def both_outcomes(script: str, cases: Any) -> tuple[Any, Any]:
    """Run the script `art/{script}.py` (one script for both libraries: its `run(lib, cases)`)
    on `cases` under ART in ART's venv and under `arthex.art` in this process; both outcomes,
    through JSON (ART's first)."""
    return art_outcome(script, cases), arthex_outcome(script, cases)
