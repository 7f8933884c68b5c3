"""The Python that has verifiers and openenv: a venv with arthex's `local`, `testing` and
`envs` extras, built once and cached, in which this folder's tests run.

verifiers 0.4 pins `openai<3` (and `mcp==2.0.0`), and the main venv has openai 3, so the two
cannot share a venv. The venv lives next to the interop venvs, in
`~/.cache/arthex-interop/envs-<key>/` (or under `$ARTHEX_INTEROP_CACHE`), the key a hash of the
requirements (read from pyproject.toml) and the interpreter's version; builders take a lock,
and a venv counts only once its `ready` marker is written. arthex itself is not installed
there: the tests import it from this checkout (PYTHONPATH). `ARTHEX_ENVS_PYTHON` names an
interpreter that already has the requirements (development).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from ..interop.art_env import cached_venv, checkout_pyroot

ROOT = Path(__file__).resolve().parents[2]
EXTRAS = ("local", "testing", "envs")
# the CPU build the main venv uses (the Makefile's TORCH_SPEC), not the newest CUDA one
TORCH = "torch==2.13.0"
BUILD_TIMEOUT_S = 1800


def requirements() -> tuple[str, ...]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [TORCH, *project["dependencies"]]
    for extra in EXTRAS:
        wanted += [r for r in project["optional-dependencies"][extra] if not r.startswith("arthex")]
    unique = []
    for requirement in wanted:
        name = re.split(r"[<>=!~\[ ;]", requirement, maxsplit=1)[0].lower()
        if name == "torch" and requirement != TORCH:
            continue
        if requirement not in unique:
            unique.append(requirement)
    return tuple(unique)


def envs_python() -> Path:
    """The interpreter of a venv that has verifiers and openenv; built on first use."""
    given = os.environ.get("ARTHEX_ENVS_PYTHON")
    if given:
        return Path(given)
    base = Path(getattr(sys, "_base_executable", sys.executable))
    wanted = requirements()
    version = (sys.version_info[0], sys.version_info[1])
    key = "envs-" + hashlib.sha256(json.dumps([wanted, version]).encode()).hexdigest()[:16]
    return cached_venv(key, str(base), wanted, _check, "the environments venv", BUILD_TIMEOUT_S)


def _check(python: Path) -> None:
    done = subprocess.run(
        [str(python), "-c", "import verifiers.v1, openenv.core, datasets, torch, pytest"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if done.returncode != 0:
        import pytest

        pytest.fail(f"{python} lacks the environments' packages: {done.stderr[-2000:]}")


def environment(tmp: Path) -> dict[str, str]:
    """The suite's environment there: arthex and the tests from this checkout, offline."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.update(
        PYTHONPATH=os.pathsep.join([str(checkout_pyroot(tmp)), str(ROOT)]),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        PYTHONNOUSERSITE="1",
        PYTHONDONTWRITEBYTECODE="1",
    )
    return env
