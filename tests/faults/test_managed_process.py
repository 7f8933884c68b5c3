"""`managed_process_cmd` (ART's `art.utils.lifecycle.managed_process_cmd` and its
`art.utils.managed_process` supervisor) with real processes: a command whose starter is
SIGKILLed is stopped with its whole process group; a command that exits on its own gives the
supervisor its exit code, and what it left running in its group is swept."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from arthex.utils.process_lifecycle import managed_process_cmd

pytestmark = [
    pytest.mark.faults,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's"),
]

# the command: starts a helper in its own process group (no new session), writes both pids,
# then sleeps (or exits with the code given)
COMMAND = """
import json, subprocess, sys, time
helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
with open(sys.argv[1] + ".tmp", "w") as out:
    json.dump({"command": __import__("os").getpid(), "helper": helper.pid}, out)
__import__("os").replace(sys.argv[1] + ".tmp", sys.argv[1])
if len(sys.argv) > 2:
    sys.exit(int(sys.argv[2]))
time.sleep(600)
"""

# the starter: wraps the command with managed_process_cmd (parent: itself) and waits
STARTER = """
import subprocess, sys, time
from arthex.utils.process_lifecycle import managed_process_cmd
subprocess.Popen(managed_process_cmd([sys.executable, "-c", sys.argv[1], sys.argv[2]]))
time.sleep(600)
"""

HANG_GUARD_S = 120.0  # not a timing check: how long a broken supervisor may hang the test


def alive(pid: int) -> bool:
    """Running (a zombie, dead but not yet reaped by its parent, is not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def wait_for(check: object, what: str) -> None:
    deadline = time.monotonic() + HANG_GUARD_S
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            pytest.fail(f"still waiting after {HANG_GUARD_S} s for {what}")
        time.sleep(0.1)


def read_pids(path: Path) -> dict[str, int]:
    wait_for(path.exists, "the command to start")
    pids: dict[str, int] = json.loads(path.read_text())
    return pids


def test_a_command_whose_starter_is_killed_is_stopped_with_its_group(tmp_path: Path) -> None:
    pids_file = tmp_path / "pids.json"
    starter = subprocess.Popen([sys.executable, "-c", STARTER, COMMAND, str(pids_file)])
    try:
        pids = read_pids(pids_file)
        assert alive(pids["command"]) and alive(pids["helper"])
        os.kill(starter.pid, signal.SIGKILL)
        starter.wait()
        wait_for(lambda: not alive(pids["command"]), "the command to stop")
        wait_for(lambda: not alive(pids["helper"]), "the command's group to be swept")
    finally:
        if starter.poll() is None:
            starter.kill()
            starter.wait()


def test_a_command_that_exits_gives_its_code_and_its_group_is_swept(tmp_path: Path) -> None:
    pids_file = tmp_path / "pids.json"
    command = [sys.executable, "-c", COMMAND, str(pids_file), "3"]
    done = subprocess.run(managed_process_cmd(command), timeout=HANG_GUARD_S, check=False)
    assert done.returncode == 3
    pids = read_pids(pids_file)
    assert not alive(pids["command"])
    wait_for(lambda: not alive(pids["helper"]), "the helper left in the group to be swept")


def test_the_command_line_is_arts_and_a_missing_command_is_a_usage_error() -> None:
    wrapped = managed_process_cmd(["echo", "hi"], parent_pid=4242)
    assert wrapped[:3] == [sys.executable, "-m", "arthex.utils.managed_process"]
    # ART's options, values: the level-2 timeout (20 s less 2 x 2 s) and the 1 s sweep grace
    assert wrapped[3:] == ["--parent-pid", "4242", "--child-timeout", "16.0",
                           "--sweep-grace", "1.0", "--", "echo", "hi"]  # fmt: skip
    done = subprocess.run(
        wrapped[:-2], capture_output=True, text=True, timeout=HANG_GUARD_S, check=False
    )
    assert done.returncode == 2 and "no command given" in done.stderr
