"""arthex with only its base install (`pip install arthex`, no extra): the `arthex` command
runs, and everywhere an optional dependency is met first (a CLI command, LocalBackend,
TinkerBackend, the wandb mirror) the answer is one line naming the extra to install (a
`MissingExtraError`), never a traceback.

The venv holds exactly the base dependencies of pyproject.toml; it is built once and cached
(tests/interop/art_env.py's `cached_venv`, keyed by those requirements), and this checkout's
`src/` is imported through PYTHONPATH, as the installed package would be.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.interop.art_env import cached_venv, checkout_pyroot, python_version

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
# What the base install must not hold, or the checks below would not meet a missing extra.
EXTRAS_ONLY = ("torch", "matplotlib", "fastapi", "uvicorn", "wandb", "tinker", "transformers")

LIBRARY = """
import asyncio, sys
import arthex
from arthex import MissingExtraError

BASE = sys.argv[1]

async def register(backend):
    model = arthex.TrainableModel(
        name="m", project="p", base_model="tiny", base_path=BASE, report_metrics=[]
    )
    await model.register(backend)

async def local():
    await register(arthex.LocalBackend(path=BASE))

async def tinker():
    await register(arthex.TinkerBackend(BASE, base_url="http://127.0.0.1:9", api_key="k"))

async def wandb():
    model = arthex.Model(name="w", project="p", base_path=BASE, report_metrics=["wandb"])
    await model.log(metrics={"x": 1.0}, split="val")

for name, call in (("local", local), ("tinker", tinker), ("wandb", wandb)):
    try:
        asyncio.run(call())
    except MissingExtraError as error:
        print(name, error.extra, str(error).replace(chr(10), " "))
    except Exception as error:
        print(name, "raised", type(error).__name__, str(error).replace(chr(10), " "))
    else:
        print(name, "no error")
"""


def base_dependencies() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return list(project["dependencies"])


def _check(python: Path) -> None:
    code = "import importlib.util as u, sys; print(*[m for m in sys.argv[1:] if u.find_spec(m)])"
    done = subprocess.run(
        [str(python), "-c", code, *EXTRAS_ONLY], capture_output=True, text=True, timeout=120
    )
    if done.returncode != 0 or done.stdout.strip():
        pytest.fail(f"the base venv {python} holds an extra's package: {done.stdout}{done.stderr}")


@pytest.fixture(scope="module")
def base_python() -> Path:
    base = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    version = python_version(base)
    requirements = base_dependencies()
    key = "base-" + hashlib.sha256(json.dumps([requirements, version]).encode()).hexdigest()[:16]
    return cached_venv(key, base, requirements, _check, "the base-install venv", 900)


def installed_root(tmp_path: Path) -> Path:
    """This checkout's src/ as `arthex`, beside the dist-info an install writes (its name,
    version and entry points, from pyproject.toml), so entry points resolve as installed."""
    root = checkout_pyroot(tmp_path)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    info = root / f"arthex-{project['version']}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: arthex\nVersion: {project['version']}\n"
    )
    groups = {"console_scripts": project["scripts"], **project["entry-points"]}
    (info / "entry_points.txt").write_text(
        "".join(
            f"[{group}]\n" + "".join(f"{name} = {target}\n" for name, target in points.items())
            for group, points in groups.items()
        )
    )
    return root


def environment(tmp_path: Path) -> dict[str, str]:
    ours = ("PYTHON", "VIRTUAL_ENV", "WANDB_")  # no wandb credentials: no mirror by default
    env = {k: v for k, v in os.environ.items() if not k.startswith(ours)}
    env.update(
        PYTHONPATH=str(installed_root(tmp_path)),
        PYTHONNOUSERSITE="1",
        NETRC=str(tmp_path / "no-netrc"),
    )
    return env


def arthex_cli(
    python: Path, tmp_path: Path, *args: str, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(python), "-m", "arthex.apps.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=environment(tmp_path),
        input=stdin,
    )


def test_the_command_runs_and_each_extra_it_lacks_is_one_line(
    base_python: Path, tmp_path: Path
) -> None:
    helped = arthex_cli(base_python, tmp_path, "--help")
    assert helped.returncode == 0, helped.stderr[-3000:]
    assert "history" in helped.stdout
    # a run to point the commands at, written by the base install itself
    made = subprocess.run(
        [str(base_python), "-c",
         "import asyncio, arthex; m = arthex.Model(name='m', project='p'); "
         "asyncio.run(m.log(metrics={'reward': 1.0}, split='val'))"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env=environment(tmp_path),
    )  # fmt: skip
    assert made.returncode == 0, made.stderr[-3000:]
    listed = arthex_cli(base_python, tmp_path, "history")  # polars and rich: base
    assert listed.returncode == 0, listed.stderr[-3000:]
    keys = tmp_path / "keys.txt"
    keys.write_text("team:ak-0123456789abcdef\n")
    for args, extra in (
        (["plot"], "cli"),
        (["view", "--port", "0"], "view"),
        (["serve", "--keys", str(keys), "--state-dir", str(tmp_path / "state")], "server"),
        (["demo", "--steps", "3"], "local"),
        (["export", "p/m", "--out", str(tmp_path / "out")], "local"),
    ):
        done = arthex_cli(base_python, tmp_path, *args)
        assert done.returncode in (1, 2), (args, done.stdout, done.stderr[-3000:])
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, (args, done.stderr[-3000:])
        assert lines[0].startswith("arthex") and f'arthex[{extra}]"' in lines[0], (args, lines)
        assert not (tmp_path / "out").exists()


def test_backends_and_the_wandb_mirror_name_their_extra(base_python: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [str(base_python), "-c", LIBRARY, str(tmp_path / ".art")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=environment(tmp_path),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    said = {line.split(" ", 1)[0]: line.split(" ", 2)[1:] for line in done.stdout.splitlines()}
    for name, extra in (("local", "local"), ("tinker", "tinker"), ("wandb", "wandb")):
        assert said[name][0] == extra, (name, done.stdout)
        assert f'pip install "arthex[{extra}]"' in said[name][1], (name, done.stdout)
