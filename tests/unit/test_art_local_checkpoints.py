"""`art.local.checkpoints`, `art.utils.network` and `art.utils.get_repo_root_path` under
arthex: checkpoint folders made here by hand (a whole one holds `trainer_state.json`, or ART's
two adapter files), so each expected value is read off the folder as written."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest

from arthex.art.local.checkpoints import (
    delete_checkpoints,
    get_last_checkpoint_dir,
    migrate_checkpoints_to_new_structure,
)
from arthex.art.utils.get_repo_root_path import get_repo_root_path
from arthex.art.utils.network import find_free_tcp_port
from arthex.core.errors import InvalidInputError


def checkpoint(folder: Path, whole: bool = True, adapter: bool = False) -> Path:
    folder.mkdir(parents=True)
    (folder / ("adapter_model.safetensors" if adapter else "model.safetensors")).write_bytes(b"w")
    if whole:
        (folder / ("adapter_config.json" if adapter else "trainer_state.json")).write_text("{}")
    return folder


def listing(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def test_the_last_checkpoint_is_the_newest_whole_one(tmp_path: Path) -> None:
    assert get_last_checkpoint_dir(str(tmp_path)) is None
    checkpoint(tmp_path / "checkpoints" / "0000")
    assert get_last_checkpoint_dir(str(tmp_path)) == f"{tmp_path}/checkpoints/0000"
    checkpoint(tmp_path / "checkpoints" / "0003", adapter=True)
    checkpoint(tmp_path / "checkpoints" / "0008", whole=False)  # half written
    checkpoint(tmp_path / "checkpoints" / "notes")
    assert get_last_checkpoint_dir(str(tmp_path)) == f"{tmp_path}/checkpoints/0003"


def test_deleting_keeps_the_excluded_steps_and_nothing_else(tmp_path: Path) -> None:
    for name in ("0001", "0002", "0004"):
        checkpoint(tmp_path / "checkpoints" / name)
    checkpoint(tmp_path / "checkpoints" / "0005", whole=False)
    (tmp_path / "checkpoints" / "notes.txt").write_text("not a step")
    delete_checkpoints(str(tmp_path), [2, 9])
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["0002", "notes.txt"]
    delete_checkpoints(str(tmp_path / "nowhere"), [])  # no checkpoints folder: nothing to do
    with pytest.raises(InvalidInputError, match="excluding must hold step numbers"):
        delete_checkpoints(str(tmp_path), ["2"])  # type: ignore[list-item]
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["0002", "notes.txt"]


def test_the_first_layouts_checkpoints_move_under_checkpoints(tmp_path: Path) -> None:
    checkpoint(tmp_path / "0001")
    checkpoint(tmp_path / "0002", adapter=True)
    checkpoint(tmp_path / "0003")
    checkpoint(tmp_path / "checkpoints" / "0003", adapter=True)  # in both layouts: left alone
    (tmp_path / "history.jsonl").write_text("{}\n")
    migrate_checkpoints_to_new_structure(str(tmp_path))
    assert listing(tmp_path) == [
        "0003/model.safetensors",
        "0003/trainer_state.json",
        "checkpoints/0001/model.safetensors",
        "checkpoints/0001/trainer_state.json",
        "checkpoints/0002/adapter_config.json",
        "checkpoints/0002/adapter_model.safetensors",
        "checkpoints/0003/adapter_config.json",
        "checkpoints/0003/adapter_model.safetensors",
        "history.jsonl",
    ]
    plain = tmp_path / "plain"
    plain.mkdir()
    migrate_checkpoints_to_new_structure(str(plain))  # nothing to move: creates nothing
    assert os.listdir(plain) == []


def test_a_free_port_can_be_bound_on_loopback() -> None:
    port = find_free_tcp_port()
    assert 1024 <= port <= 65535
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))


def test_the_repo_root_is_the_checkout_arthex_runs_from() -> None:
    import arthex

    where = Path(arthex.__file__).resolve().parent
    done = subprocess.run(
        ["git", "rev-parse", "--show-toplevel"], cwd=where, capture_output=True, text=True
    )
    expected = done.stdout.strip() if done.returncode == 0 else "."
    assert get_repo_root_path() == expected
