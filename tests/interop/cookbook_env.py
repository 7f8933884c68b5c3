"""The Python that runs tinker-cookbook's recipes: a venv with `tinker-cookbook` 0.5.8, the
tinker SDK arthex pins (0.38.0) and the CPU torch the main venv uses, built once and cached
like the ART venv (art_env.py: the cache folder, lock and `ready` marker), under a key of its
own. arthex is not installed there: the recipes talk to arthex's Tinker server over loopback,
as any Tinker user's code would.

0.5.8 is the newest cookbook whose requirements install here with tinker 0.38.0 (0.6.1 needs
tml-renderers >= 0.4.1, which is not published for it yet). The cookbook needs Python >= 3.11,
so the venv is made from the interpreter arthex's own venv is made from.
`ARTHEX_INTEROP_COOKBOOK_PYTHON` names an interpreter that already has the requirements,
skipping the build (for development).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .art_env import cached_venv

COOKBOOK_VERSION = "0.5.8"
TINKER_VERSION = "0.38.0"
# the main venv's torch (the Makefile's TORCH_SPEC): its CPU build, not a CUDA one
TORCH = "torch==2.13.0"
REQUIREMENTS = (f"tinker-cookbook=={COOKBOOK_VERSION}", f"tinker=={TINKER_VERSION}", TORCH)
SCRIPTS = Path(__file__).parent / "cookbook"
BUILD_TIMEOUT_S = 1800


def venv_key(version: tuple[int, int]) -> str:
    digest = hashlib.sha256(json.dumps(["cookbook", REQUIREMENTS, version]).encode())
    return "cookbook-" + digest.hexdigest()[:16]


def cookbook_python() -> Path:
    """The interpreter of a venv that has tinker-cookbook; built on first use."""
    given = os.environ.get("ARTHEX_INTEROP_COOKBOOK_PYTHON")
    if given:
        _check(Path(given))
        return Path(given)
    base = str(getattr(sys, "_base_executable", sys.executable))
    version = (sys.version_info[0], sys.version_info[1])
    return cached_venv(
        venv_key(version), base, REQUIREMENTS, _check, "the cookbook venv", BUILD_TIMEOUT_S
    )


def _check(python: Path) -> None:
    script = (
        "import importlib.metadata as m, torch, tinker_cookbook.rl.train, "
        "tinker_cookbook.supervised.train; "
        "print(m.version('tinker-cookbook'), m.version('tinker'), torch.cuda.is_available())"
    )
    done = subprocess.run(
        [str(python), "-c", script], capture_output=True, text=True, timeout=300,
        env=cookbook_environment(),
    )  # fmt: skip
    found = done.stdout.split()[-3:] if done.returncode == 0 else []
    if found[:2] != [COOKBOOK_VERSION, TINKER_VERSION]:
        pytest.fail(
            f"{python} does not have {', '.join(REQUIREMENTS)}: "
            f"{(done.stdout + done.stderr)[-2000:]}",
            pytrace=False,
        )


def cookbook_environment(base_url: str | None = None, api_key: str | None = None) -> dict[str, str]:
    """A recipe's environment: the Tinker server's address and key as the SDK reads them, none
    of arthex's Python settings, nothing reaching a hub or a logging service."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        WANDB_MODE="disabled",
        TINKER_TELEMETRY="0",
        TOKENIZERS_PARALLELISM="false",
        OMP_NUM_THREADS="1",
        PYTHONNOUSERSITE="1",
        PYTHONDONTWRITEBYTECODE="1",
    )
    if base_url is not None:
        env["TINKER_BASE_URL"] = base_url
    if api_key is not None:
        env["TINKER_API_KEY"] = api_key
    return env


def run_recipe(
    python: Path,
    script: str,
    payload: dict[str, Any],
    env: dict[str, str],
    cwd: Path,
    timeout_s: float,
) -> subprocess.CompletedProcess[str]:
    """Run `cookbook/<script>` in the cookbook's venv, in `cwd`, with `payload` as JSON on stdin;
    a failure or a timeout fails the test with the script's output."""
    try:
        done = subprocess.run(
            [str(python), str(SCRIPTS / script)], input=json.dumps(payload),
            capture_output=True, text=True, cwd=cwd, timeout=timeout_s, env=env,
        )  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        out = exc.stderr.decode() if isinstance(exc.stderr, bytes) else str(exc.stderr)
        pytest.fail(f"the cookbook's {script} ran past {timeout_s} s:\n{out[-6000:]}")
    if done.returncode != 0:
        pytest.fail(
            f"the cookbook's {script} failed (exit {done.returncode}):\n"
            f"{(done.stdout + done.stderr)[-8000:]}"
        )
    return done
