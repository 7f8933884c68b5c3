"""What a new user meets first: the documented calls work and the package shows only its API."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

import arthex
import arthex.testing
from arthex.core.errors import TooManyExceptionsError
from arthex.core.gather import gather_trajectory_groups
from arthex.core.trajectories import Trajectory, TrajectoryGroup

ROOT = Path(__file__).resolve().parents[2]


def test_tiny_model_is_callable_from_the_testing_package() -> None:
    # importing the module of the same name first must not shadow the documented function
    script = (
        "import arthex.testing.tiny_model\n"
        "import arthex.testing\n"
        "from arthex.testing.tiny_model import tiny_model\n"
        "assert callable(arthex.testing.tiny_model), type(arthex.testing.tiny_model)\n"
        "assert arthex.testing.tiny_model is tiny_model\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True)
    assert callable(arthex.testing.tiny_model)


def test_dir_of_the_package_lists_only_public_names() -> None:
    listed = set(dir(arthex))
    for helper in ("Any", "TYPE_CHECKING", "importlib", "annotations", "_EXPORTS"):
        assert helper not in listed
    assert {"TrainableModel", "Trajectory", "gather_trajectory_groups", "__version__"} <= listed
    for name in listed - {"__version__"}:
        assert getattr(arthex, name) is not None


def test_the_license_is_an_spdx_string_not_a_deprecated_table() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    assert 'license = "Apache-2.0"' in text
    assert "license = {" not in text


def _raises_deep_inside() -> None:
    raise KeyError("missing-answer-key")


async def _failing_group() -> TrajectoryGroup:
    async def rollout() -> Trajectory:
        _raises_deep_inside()
        raise AssertionError("unreachable")

    return await arthex.trajectory_group([rollout()])


def test_too_many_exceptions_shows_where_the_first_error_was_raised() -> None:
    with pytest.raises(TooManyExceptionsError) as caught:
        asyncio.run(gather_trajectory_groups([_failing_group()], progress=False))
    message = str(caught.value)
    assert "KeyError" in message and "missing-answer-key" in message
    # the frame that raised, with its file, from the rollout's own traceback
    assert "_raises_deep_inside" in message
    assert "test_newcomer_surface.py" in message


def test_make_takes_torch_from_the_index_the_user_names() -> None:
    index = "https://download.pytorch.org/whl/cpu"
    planned = subprocess.run(
        ["make", "-n", "-B", "setup", f"TORCH_INDEX_URL={index}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    torch_line = next(line for line in planned.splitlines() if '"torch==' in line)
    assert f"--index-url {index}" in torch_line
    default = subprocess.run(
        ["make", "-n", "-B", "setup"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert "--index-url" not in default
