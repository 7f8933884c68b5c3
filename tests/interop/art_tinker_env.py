"""The Python that runs ART's Tinker modules (`art.tinker_native.data`, which imports tinker,
tinker-cookbook and torch): a venv with openpipe-art 0.5.23, the tinker SDK arthex pins
(0.38.0), tinker-cookbook 0.5.8 (cookbook_env.py: the newest that installs with it), the
vLLM venv's torch and the server packages `art.tinker_native` imports, built once with uv and
cached like the ART venv (art_env.py: the cache folder, lock and `ready` marker), under a key of its
own. ART's own `tinker` extra pins tinker < 0.35; both libraries run here on the same SDK and
cookbook, so what differs between them is their code alone. arthex is not installed: its runs
put the checkout on PYTHONPATH (art_env.checkout_pyroot).
`ARTHEX_INTEROP_ART_TINKER_PYTHON` names an interpreter that already has the requirements,
skipping the build (for development).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from .art_env import ART_VERSION, art_environment, keyed_venv
from .cookbook_env import COOKBOOK_VERSION, TINKER_VERSION

# Python 3.12 has only CUDA builds of torch on PyPI (about 5 GB with NVIDIA's libraries): take
# the one the vLLM venv pins (the Makefile's VLLM_TORCH_SPEC), so uv installs it from the
# wheels it already holds for that venv instead of downloading a second torch
TORCH = "torch==2.14.0"
REQUIREMENTS = (
    f"openpipe-art=={ART_VERSION}",
    f"tinker=={TINKER_VERSION}",
    f"tinker-cookbook=={COOKBOOK_VERSION}",
    TORCH,
    "fastapi>=0.128.0",
    "uvicorn>=0.35.0",
)
BUILD_TIMEOUT_S = 1800


def art_tinker_python() -> Path:
    """The interpreter of a venv with ART, tinker and tinker-cookbook; built on first use."""
    return keyed_venv(
        "art-tinker",
        REQUIREMENTS,
        _check,
        given_by="ARTHEX_INTEROP_ART_TINKER_PYTHON",
        what="the ART Tinker venv",
        timeout=BUILD_TIMEOUT_S,
    )


def _check(python: Path) -> None:
    script = (
        "import importlib.metadata as m, art.tinker_native.data, tinker_cookbook.renderers; "
        "print(*(m.version(p) for p in ('openpipe-art', 'tinker', 'tinker-cookbook')))"
    )
    done = subprocess.run(
        [str(python), "-c", script], capture_output=True, text=True, timeout=300,
        env=art_environment(),
    )  # fmt: skip
    found = done.stdout.split()[-3:] if done.returncode == 0 else []
    if found != [ART_VERSION, TINKER_VERSION, COOKBOOK_VERSION]:
        pytest.fail(
            f"{python} does not have {', '.join(REQUIREMENTS[:3])}: "
            f"{(done.stdout + done.stderr)[-2000:]}",
            pytrace=False,
        )
