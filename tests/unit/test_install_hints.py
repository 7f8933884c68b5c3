"""A missing piece is named in one line with the command that fixes it for this install: the
extra's pip command as arthex itself was installed (PEP 610's direct_url.json, read from real
dist-info folders), the contract kit without pytest, and the RULER judge without credentials."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from arthex.core.errors import InvalidInputError, MissingExtraError, install_command
from arthex.rewards.ruler import ruler_score_group
from arthex.testing.builders import make_group


def dist_info(tmp_path: Path, direct_url: dict[str, object] | None) -> metadata.Distribution:
    folder = tmp_path / "arthex-0.1.0.dist-info"
    folder.mkdir()
    (folder / "METADATA").write_text("Metadata-Version: 2.1\nName: arthex\nVersion: 0.1.0\n")
    if direct_url is not None:
        (folder / "direct_url.json").write_text(json.dumps(direct_url))
    return metadata.PathDistribution(folder)


@pytest.mark.parametrize(
    ("direct_url", "expected"),
    [
        (None, 'pip install "arthex[wandb]"'),  # from an index
        (
            {"url": "file:///home/me/arthex", "dir_info": {"editable": True}},
            'pip install -e "/home/me/arthex[wandb]"',
        ),
        ({"url": "file:///src/my%20arthex", "dir_info": {}}, 'pip install "/src/my arthex[wandb]"'),
        (
            {
                "url": "https://github.com/o/arthex.git",
                "vcs_info": {"vcs": "git", "commit_id": "ab12", "requested_revision": "v0.1"},
            },
            'pip install "arthex[wandb] @ git+https://github.com/o/arthex.git@v0.1"',
        ),
        (
            {"url": "file:///w/arthex-0.1.0-py3-none-any.whl", "archive_info": {}},
            'pip install "/w/arthex-0.1.0-py3-none-any.whl[wandb]"',
        ),
    ],
)
def test_the_hint_names_the_command_for_the_way_arthex_was_installed(
    tmp_path: Path, direct_url: dict[str, object] | None, expected: str
) -> None:
    assert install_command("wandb", dist_info(tmp_path, direct_url)) == expected


def test_a_missing_extra_names_this_installs_command() -> None:
    message = str(MissingExtraError("wandb", "wandb"))
    try:
        dist = metadata.distribution("arthex")
    except metadata.PackageNotFoundError:
        pytest.skip("arthex runs from a path without installed metadata")
    found = [f for f in dist.files or () if f.name == "direct_url.json"]
    origin = json.loads(Path(str(found[0].locate())).read_text()) if found else {}
    if origin.get("dir_info", {}).get("editable"):
        folder = origin["url"].removeprefix("file://")
        assert message.endswith(f'install it with: pip install -e "{folder}[wandb]"'), message
        assert 'pip install "arthex[wandb]"' not in message
    elif not origin:
        assert message.endswith('install it with: pip install "arthex[wandb]"'), message


def test_the_contract_kit_without_pytest_names_the_testing_extra() -> None:
    code = "import sys; sys.modules['pytest'] = None; import arthex.testing.contracts"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("arthex.core.errors.MissingExtraError: pytest is not installed; ")
    assert last.endswith('[testing]"'), last


def test_the_judge_without_credentials_names_the_variable_and_the_argument(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(InvalidInputError) as refused:
        asyncio.run(ruler_score_group(make_group((0.0, 1.0)), "openai/o3", cache=None))
    message = str(refused.value)
    assert "\n" not in message
    assert "OPENAI_API_KEY" in message and "client=" in message
