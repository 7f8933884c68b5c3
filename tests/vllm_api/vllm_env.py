"""The Python that has a real vLLM: a venv with a pinned vLLM release (and the torch it pins),
built once and cached, in which the adapter's calls are checked against vLLM's own classes.

vLLM is large (its wheel alone is over 300 MB, and it pins a CUDA build of torch with the
NVIDIA libraries: about 9.5 GB in the venv), so the venv is built with uv, which installs it
in about four minutes where pip takes fifteen. The suite runs in every `make test`;
`ARTHEX_VLLM_TESTS=0` skips it on a machine without the disk or the time (see
docs/backends/local.md). No GPU is needed: what is checked is what vLLM builds and
validates on the CPU.

The venv lives next to the interop venvs, in `~/.cache/arthex-interop/vllm-<key>/` (or under
`$ARTHEX_INTEROP_CACHE`), the key a hash of the requirements and the interpreter's version.
Builders take a lock and a venv counts only once its `ready` marker is written.
`ARTHEX_VLLM_PYTHON` names an interpreter that already has the requirements (development);
`ARTHEX_VLLM_VERSION` tests another release of `TESTED_VLLM` than 0.33.0.
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

from ..interop.art_env import cached_venv, checkout_pyroot

DEFAULT_VERSION = "0.33.0"
# ARTHEX_VLLM_VERSION picks another tested release (e.g. 0.26.0); each gets its own venv.
VLLM_VERSION = os.environ.get("ARTHEX_VLLM_VERSION") or DEFAULT_VERSION
# arthex's own core dependencies, so the adapter imports in that venv; vLLM brings the rest
# (torch, transformers, tokenizers, safetensors, pydantic, openai).
REQUIREMENTS = (
    f"vllm=={VLLM_VERSION}",
    "peft>=0.17",
    "attrs>=23.2",
    "pyarrow>=15",
    "polars>=1.0",
    "dependency-injector>=4.42",
)
BUILD_TIMEOUT_S = 3600
ENABLE = "ARTHEX_VLLM_TESTS"


def enabled() -> bool:
    return os.environ.get(ENABLE, "1").strip().lower() not in ("0", "false", "no", "off")


def venv_key(version: tuple[int, int]) -> str:
    return "vllm-" + hashlib.sha256(json.dumps([REQUIREMENTS, version]).encode()).hexdigest()[:16]


def vllm_python() -> Path:
    """The interpreter of a venv that has vLLM; built on first use."""
    given = os.environ.get("ARTHEX_VLLM_PYTHON")
    if given:
        return Path(given)
    base = Path(getattr(sys, "_base_executable", sys.executable))
    key = venv_key((sys.version_info[0], sys.version_info[1]))
    return cached_venv(
        key, str(base), REQUIREMENTS, None, "the vLLM venv", BUILD_TIMEOUT_S, installer="uv"
    )


def environment(pyroot: Path) -> dict[str, str]:
    """A vLLM process's environment: arthex importable from this checkout, nothing reaching
    the network, no GPU looked for."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.update(
        PYTHONPATH=str(pyroot),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        PYTHONNOUSERSITE="1",
        PYTHONDONTWRITEBYTECODE="1",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        CUDA_VISIBLE_DEVICES="",
    )
    return env


def run_checks(python: Path, script: Path, payload: dict[str, Any], tmp: Path) -> Any:
    """Run `script` in the vLLM venv with `payload` on stdin; it prints one JSON value."""
    done = subprocess.run(
        [str(python), str(script)], input=json.dumps(payload), capture_output=True, text=True,
        cwd=tmp, timeout=900, env=environment(checkout_pyroot(tmp)),
    )  # fmt: skip
    if done.returncode != 0:
        pytest.fail(f"the vLLM checks failed (exit {done.returncode}):\n{done.stderr[-6000:]}")
    return json.loads(done.stdout.splitlines()[-1])
