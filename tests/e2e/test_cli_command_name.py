"""The commands arthex prints for the user to type next (the viewer hint below a table, the
advice in an empty folder, the demo's footer) work where they are printed: the bare `arthex`
when PATH finds this very entry point, else the entry point's own path (`.venv/bin/arthex`
from the checkout, before the venv is activated). Each printed command is run by a shell
with the same PATH, which is the oracle: it must start arthex."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

import arthex

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
ENTRY_POINT = Path(sys.executable).parent / "arthex"  # the venv's console script


def shell_path(with_entry_point: bool) -> str:
    """PATH as a shell has it before (False) or after (True) activating the venv."""
    others = [
        part
        for part in os.environ.get("PATH", "").split(os.pathsep)
        if part and Path(part).resolve() != ENTRY_POINT.parent.resolve()
    ]
    return os.pathsep.join([str(ENTRY_POINT.parent), *others] if with_entry_point else others)


def run(args: list[str], cwd: Path, path: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "VIRTUAL_ENV"))}
    return subprocess.run(
        [str(ENTRY_POINT), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={**env, "PATH": path},
    )


def starts_arthex(command: str, cwd: Path, path: str) -> bool:
    """Whether a shell with this PATH, in `cwd`, runs `command version` as arthex."""
    done = subprocess.run(
        ["/bin/sh", "-c", f"{command} version"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={**os.environ, "PATH": path},
    )
    return done.returncode == 0 and done.stdout.strip() == arthex.__version__


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("names") / ".art"
    model = arthex.Model(name="m", project="p", base_path=str(root), report_metrics=[])
    asyncio.run(model.log(metrics={"reward": 0.5}, split="val"))
    return root


@pytest.mark.skipif(not ENTRY_POINT.is_file(), reason="arthex is not installed in this venv")
@pytest.mark.parametrize("activated", [False, True], ids=["not on PATH", "on PATH"])
@pytest.mark.parametrize("cwd", ["elsewhere", "checkout"])
def test_printed_commands_run_from_where_they_are_printed(
    base: Path, tmp_path: Path, activated: bool, cwd: str
) -> None:
    where = ROOT if cwd == "checkout" else tmp_path
    path = shell_path(activated)
    listed = run(["runs", "--base-path", str(base)], where, path)
    assert listed.returncode == 0, listed.stderr
    (hint,) = [line for line in listed.stderr.splitlines() if line.startswith("see it live")]
    command = hint.removeprefix("see it live in a browser: ").rsplit(" view ", 1)[0]
    assert starts_arthex(command, where, path), hint
    if activated:
        assert command == "arthex"
    empty = run(["history", "--base-path", str(tmp_path / "empty")], where, path)
    (line,) = empty.stderr.splitlines()
    assert f"(e.g. `{command} demo`)" in line


def test_the_demo_says_once_how_to_activate_when_arthex_is_not_on_path() -> None:
    from arthex.apps.cli.common import activate_hint, arthex_command

    arthex_command.cache_clear()
    hint = activate_hint()
    if arthex_command() == "arthex":
        assert hint is None
    else:
        assert hint is not None and hint.endswith(
            f"source {Path(arthex_command()).parent}/activate"
        )
