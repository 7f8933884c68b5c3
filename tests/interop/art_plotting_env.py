"""The Python that runs ART's plotting code (`art.utils.old_benchmarking`'s table, line graphs
and image grid import pandas, matplotlib and IPython at import): a venv with openpipe-art
0.5.23 and its `plotting` extra (matplotlib, seaborn, which brings pandas), IPython, and
arthex's base dependencies that ART does not bring (arthex is not installed: its runs put the
checkout on PYTHONPATH, art_env.checkout_pyroot), so both libraries run on the same packages.
Built once with uv and cached like the ART venv (art_env.py: the cache folder, lock and
`ready` marker), under a key of its own. `ARTHEX_INTEROP_ART_PLOTTING_PYTHON` names an
interpreter that already has them, skipping the build (for development).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from .art_env import ART_VERSION, art_environment, keyed_venv

REQUIREMENTS = (
    f"openpipe-art[plotting]=={ART_VERSION}",
    "ipython>=8",
    "pyarrow>=15",
    "attrs>=23.2",
    "dependency-injector>=4.42",
    "pyyaml>=6",
)
BUILD_TIMEOUT_S = 1800


def art_plotting_python() -> Path:
    """The interpreter of a venv with ART, its plotting extra and IPython; built on first use."""
    return keyed_venv(
        "art-plotting",
        REQUIREMENTS,
        _check,
        given_by="ARTHEX_INTEROP_ART_PLOTTING_PYTHON",
        what="the ART plotting venv",
        timeout=BUILD_TIMEOUT_S,
    )


def _check(python: Path) -> None:
    script = (
        "import importlib.metadata as m, pandas, matplotlib, IPython, pyarrow, attrs; "
        "print(m.version('openpipe-art'))"
    )
    done = subprocess.run(
        [str(python), "-c", script], capture_output=True, text=True, timeout=300,
        env=art_environment(),
    )  # fmt: skip
    if done.returncode != 0 or done.stdout.split()[-1:] != [ART_VERSION]:
        pytest.fail(
            f"{python} does not have {', '.join(REQUIREMENTS)}: "
            f"{(done.stdout + done.stderr)[-2000:]}",
            pytrace=False,
        )
