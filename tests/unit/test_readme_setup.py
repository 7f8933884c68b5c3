"""The README says where `make demo` takes torch from as the Makefile does: the default index
(the Makefile's `TORCH_INDEX_URL` default), what that brings on plain PyPI, and the command
that points it at PyTorch's CPU index, which the Makefile then passes to pip."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def readme() -> str:
    return " ".join((ROOT / "README.md").read_text().split())


def makefile_default() -> str:
    found = re.search(r"^TORCH_INDEX_URL \?=(.*)$", (ROOT / "Makefile").read_text(), re.M)
    assert found, "the Makefile sets no TORCH_INDEX_URL default"
    return found.group(1).strip()


def test_the_readme_states_the_makefiles_default_torch_index() -> None:
    text = readme()
    default = makefile_default()
    if default:
        assert f"`TORCH_INDEX_URL` is `{default}` by default" in text
    else:
        assert "`TORCH_INDEX_URL` is empty by default" in text
        assert "CUDA wheels" in text  # what plain PyPI brings then
        assert "so no CUDA wheels are pulled in" not in text
    if default != CPU_INDEX:
        assert "installing torch's CPU build" not in text


def test_the_readmes_cpu_command_reaches_pip() -> None:
    command = f"make demo TORCH_INDEX_URL={CPU_INDEX}"
    assert command in readme()
    planned = subprocess.run(
        ["make", "-n", "-B", "setup", f"TORCH_INDEX_URL={CPU_INDEX}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    torch_line = next(line for line in planned.splitlines() if '"torch==' in line)
    assert f"--index-url {CPU_INDEX}" in torch_line


def quickstart() -> str:
    return " ".join((ROOT / "docs" / "quickstart.md").read_text().split())


def test_the_quickstart_tells_the_readmes_story_of_where_torch_comes_from() -> None:
    """One story on both pages: where `make demo` takes torch from is the Makefile's default,
    and the CPU build is the command that names PyTorch's CPU index."""
    default = makefile_default()
    said = (
        f"`TORCH_INDEX_URL` is `{default}` by default"
        if default
        else "`TORCH_INDEX_URL` is empty by default"
    )
    for page, text in (("README.md", readme()), ("docs/quickstart.md", quickstart())):
        assert said in text, page
        assert "pip's configured index" in text, page
        assert f"make demo TORCH_INDEX_URL={CPU_INDEX}" in text, page
        if default != CPU_INDEX:
            assert "installs torch's CPU build" not in text, page


def test_the_quickstart_activates_the_venv_before_its_bare_arthex_commands() -> None:
    text = quickstart()
    first = text.index("arthex runs")
    assert "source .venv/bin/activate" in text[:first]
