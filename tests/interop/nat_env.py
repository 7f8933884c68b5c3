"""The Python that runs NVIDIA NeMo Agent Toolkit's ART plugin: a venv with
`nvidia-nat-openpipe-art` 1.9.0 and the ART it is pinned to (`openpipe-art` 0.5.17), plus
pyarrow and duckdb (ART's `Model.log` writes trajectories as parquet), built once and cached
like the ART venv (art_env.py: the same interpreter search, cache folder, lock and `ready`
marker), under a key of its own. `ARTHEX_INTEROP_NAT_PYTHON` names an interpreter that
already has the requirements, skipping the build (for development).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from .art_env import art_environment, cached_venv, find_python

NAT_VERSION = "1.9.0"
ART_VERSION = "0.5.17"
REQUIREMENTS = (
    f"nvidia-nat-openpipe-art=={NAT_VERSION}",
    f"openpipe-art=={ART_VERSION}",
    "pyarrow>=15",
    "duckdb>=1.0",
)
SCRIPTS = Path(__file__).parent / "nat"
BUILD_TIMEOUT_S = 2400


def venv_key(version: tuple[int, int]) -> str:
    return hashlib.sha256(json.dumps(["nat", REQUIREMENTS, version]).encode()).hexdigest()[:16]


def nat_python() -> Path:
    """The interpreter of a venv that has NAT's ART plugin; built on first use."""
    given = os.environ.get("ARTHEX_INTEROP_NAT_PYTHON")
    if given:
        _check(Path(given))
        return Path(given)
    base, version = find_python()
    return cached_venv(
        venv_key(version), base, REQUIREMENTS, _check, "the NAT interop venv", BUILD_TIMEOUT_S
    )


def _check(python: Path) -> None:
    script = (
        "import importlib.metadata as m, pyarrow, duckdb; "
        "import nat.plugins.openpipe.trainer_adapter; "
        "print(m.version('nvidia-nat-openpipe-art'), m.version('openpipe-art'))"
    )
    done = subprocess.run(
        [str(python), "-c", script], capture_output=True, text=True, timeout=300,
        env=art_environment(),
    )  # fmt: skip
    found = done.stdout.split()[-2:] if done.returncode == 0 else []
    if found != [NAT_VERSION, ART_VERSION]:
        pytest.fail(
            f"{python} does not have {', '.join(REQUIREMENTS)}: "
            f"{(done.stdout + done.stderr)[-2000:]}",
            pytrace=False,
        )


def run_nat(
    python: Path, script: str, payload: dict[str, Any], cwd: Path, timeout_s: float
) -> dict[str, Any]:
    """Run `nat/<script>` in NAT's venv with `payload` on stdin; its JSON answer, which the
    script writes to the file `out` (ART and NAT print to stdout). A failure or a timeout
    fails the test with the script's stderr."""
    out = cwd / f"nat-answer-{os.getpid()}-{script}.json"
    out.unlink(missing_ok=True)
    payload = {**payload, "out": str(out)}
    try:
        done = subprocess.run(
            [str(python), str(SCRIPTS / script)],
            input=json.dumps(payload), capture_output=True, text=True, cwd=cwd,
            timeout=timeout_s, env=art_environment(),
        )  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        stderr = exc.stderr.decode() if isinstance(exc.stderr, bytes) else str(exc.stderr)
        pytest.fail(f"NAT's {script} ran past {timeout_s} s:\n{stderr[-6000:]}")
    if done.returncode != 0:
        pytest.fail(f"NAT's {script} failed (exit {done.returncode}):\n{done.stderr[-8000:]}")
    answer: dict[str, Any] = json.loads(out.read_text())
    answer["stderr"] = done.stderr
    out.unlink()
    return answer
