"""The parquet store's part files (adapters/parquet/parts.py), function by function: the names
of step files and legacy `-N` parts, listing them on a local and on a non-local filesystem,
what a step file's footer says it folded, a part's identity (size and a hash of its last 64
KiB, worked out here from the physical file) and reading one step while a writer folds."""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from arthex.adapters.parquet.parts import (
    FOLDED_KEY,
    PartFile,
    folded_parts,
    list_dir,
    list_parts,
    parse_part_name,
    part_identity,
    part_name,
    read_step,
    read_tail,
    step_parts,
)
from arthex.adapters.parquet.store import ParquetTrajectoryStore
from arthex.core.errors import CorruptDataError, InvalidInputError
from arthex.core.identity import RunRef
from arthex.core.trajectories import TrajectoryGroup
from arthex.testing.builders import make_group
from tests._parts import write_legacy_part

LOCAL = pafs.LocalFileSystem()
RUN = RunRef("proj", "run-1")


def tagged(*tags: int) -> list[TrajectoryGroup]:
    return [make_group([0.0, 1.0], metadata={"n": tag}) for tag in tags]


def tags(groups: list[TrajectoryGroup]) -> list[object]:
    return [g.metadata["n"] for g in groups]


def step_file(root: Path, groups: list[TrajectoryGroup], step: int = 0) -> Path:
    """A step file as the store writes it, under `root`."""
    store = ParquetTrajectoryStore(str(root))
    return Path(asyncio.run(store.write(RUN, "train", step, groups)))


# --- names ------------------------------------------------------------------------------


def test_a_step_file_and_a_legacy_part_are_named_as_art_and_old_arthex_wrote_them() -> None:
    assert part_name(3) == "0003.parquet"
    assert part_name(3, 0) == "0003.parquet"
    assert part_name(3, 1) == "0003-1.parquet"
    assert part_name(7, 12) == "0007-12.parquet"
    assert part_name(12345, 2) == "12345-2.parquet"


@pytest.mark.parametrize(
    ("name", "parsed"),
    [
        ("0003.parquet", (3, 0)),
        ("0000.parquet", (0, 0)),
        ("0003-1.parquet", (3, 1)),
        ("0003-10.parquet", (3, 10)),
        ("12345.parquet", (12345, 0)),
        ("12345-7.parquet", (12345, 7)),
    ],
)
def test_a_part_name_gives_its_step_and_part(name: str, parsed: tuple[int, int]) -> None:
    assert parse_part_name(name) == parsed


@pytest.mark.parametrize(
    "name",
    [
        "12.parquet",  # narrower than ART's four digits
        "00012.parquet",  # a leading zero past four digits
        "0008-0.parquet",  # part 0 is the step file itself
        "0008-01.parquet",
        "0008-.parquet",
        ".tmp-0005.parquet",  # a file being written
        ".tmp-0005.parquet.123.abcd",
        "0007.parquet.bak",
        "x0007.parquet",
        "0007.parquetx",
        "0007",
        ".lock",
        "",
    ],
)
def test_other_names_are_not_parts(name: str) -> None:
    assert parse_part_name(name) is None


def test_a_part_name_reads_back_as_what_named_it() -> None:
    for step, part in [(0, 0), (9, 1), (10000, 3), (42, 11)]:
        assert parse_part_name(part_name(step, part)) == (step, part)


# --- listing ----------------------------------------------------------------------------


def test_a_directory_lists_its_files_and_folders_and_a_missing_one_lists_nothing(
    tmp_path: Path,
) -> None:
    (tmp_path / "a.parquet").write_bytes(b"x")
    (tmp_path / "sub").mkdir()
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    kinds = {info.base_name: info.type for info in list_dir(LOCAL, str(tmp_path))}
    assert kinds == {
        "a.parquet": pafs.FileType.File,
        "sub": pafs.FileType.Directory,
        "dangling": pafs.FileType.Unknown,
    }
    assert [i.path for i in list_dir(LOCAL, str(tmp_path)) if i.base_name == "sub"] == [
        str(tmp_path / "sub")
    ]
    assert list_dir(LOCAL, str(tmp_path / "missing")) == []
    assert list_dir(LOCAL, str(tmp_path / "a.parquet")) == []  # a file, not a directory


def test_a_directory_on_another_filesystem_is_listed_through_it(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "0001.parquet").write_bytes(b"x")
    (tmp_path / "d" / "sub").mkdir()
    subtree = pafs.SubTreeFileSystem(str(tmp_path), LOCAL)
    assert subtree.type_name != "local"
    kinds = {info.base_name: info.type for info in list_dir(subtree, "d")}
    assert kinds == {"0001.parquet": pafs.FileType.File, "sub": pafs.FileType.Directory}
    assert list_dir(subtree, "missing") == []


def make_run(root: Path) -> Path:
    """A model's trajectories folder: train steps 0 and 2 (step 0 with a legacy part), val
    step 1, a hidden folder and names the store does not write."""
    trajectories = root / "trajectories"
    for split, step in [("train", 0), ("train", 2), ("val", 1)]:
        (trajectories / split).mkdir(parents=True, exist_ok=True)
        (trajectories / split / part_name(step)).write_bytes(b"step file")
    (trajectories / "train" / part_name(0, 1)).write_bytes(b"legacy part")
    (trajectories / "train" / "notes.txt").write_text("x")
    (trajectories / "train" / ".tmp-0003.parquet.1.ab").write_bytes(b"half")
    (trajectories / "train" / part_name(4)).mkdir()  # a folder with a part's name
    (trajectories / ".hidden").mkdir()
    (trajectories / ".hidden" / part_name(0)).write_bytes(b"x")
    (trajectories / "stray.parquet").write_bytes(b"x")  # a file, not a split
    return trajectories


def listed(parts: list[PartFile]) -> list[tuple[str, int, int, str]]:
    return [(p.split, p.step, p.part, Path(p.path).name) for p in parts]


def test_every_split_is_listed_by_split_step_and_part(tmp_path: Path) -> None:
    trajectories = make_run(tmp_path)
    parts = list_parts(LOCAL, str(trajectories))
    assert listed(parts) == [
        ("train", 0, 0, "0000.parquet"),
        ("train", 0, 1, "0000-1.parquet"),
        ("train", 2, 0, "0002.parquet"),
        ("val", 1, 0, "0001.parquet"),
    ]
    assert parts[1].path == f"{trajectories}/train/0000-1.parquet"


def test_splits_and_steps_choose_the_parts(tmp_path: Path) -> None:
    trajectories = str(make_run(tmp_path))
    assert listed(list_parts(LOCAL, trajectories, "val")) == [("val", 1, 0, "0001.parquet")]
    assert [p.step for p in list_parts(LOCAL, trajectories, ["train"], 2)] == [2]
    assert [(p.split, p.step) for p in list_parts(LOCAL, trajectories, None, [1, 2])] == [
        ("train", 2),
        ("val", 1),
    ]
    assert list_parts(LOCAL, trajectories, ("val", "train"), (7,)) == []
    assert list_parts(LOCAL, trajectories, "test") == []  # a split never written
    assert list_parts(LOCAL, str(tmp_path / "none")) == []


def test_a_step_filter_keeps_every_wanted_step_among_many_files(tmp_path: Path) -> None:
    """Twenty steps and twenty other names in one split, in whatever order the directory
    lists them: the filter keeps the odd steps, every one of them."""
    directory = tmp_path / "trajectories" / "train"
    directory.mkdir(parents=True)
    for step in range(20):
        (directory / part_name(step)).write_bytes(b"x")
        (directory / f"notes-{step}.txt").write_bytes(b"x")
    odd = list(range(1, 20, 2))
    assert [p.step for p in list_parts(LOCAL, str(directory.parent), "train", odd)] == odd
    assert [p.step for p in list_parts(LOCAL, str(directory.parent))] == list(range(20))


@pytest.mark.parametrize(
    ("split", "steps", "message"),
    [
        ("train", True, "steps must be a int or an iterable of them, got True"),
        ("train", "0", "steps must be a int or an iterable of them, got '0'"),
        ("train", 1.5, "steps must be a int or an iterable of them, got 1.5"),
        ("train", [1, True, "2"], "steps must hold only int values, got [True, '2']"),
        (b"train", None, "split must be a str or an iterable of them, got b'train'"),
        (5, None, "split must be a str or an iterable of them, got 5"),
        (["train", 5], None, "split must hold only str values, got [5]"),
        ("train", [0, "a", "b", "c", True], "steps must hold only int values, got ['a', 'b', 'c']"),
    ],
)
def test_filters_of_the_wrong_type_are_refused_naming_them(
    tmp_path: Path, split: Any, steps: Any, message: str
) -> None:
    with pytest.raises(InvalidInputError) as caught:
        list_parts(LOCAL, str(tmp_path), split, steps)
    assert str(caught.value) == message


def test_a_split_that_is_not_a_name_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError) as caught:
        list_parts(LOCAL, str(tmp_path), ["train", "../train"])
    assert str(caught.value).startswith("split '../train' is not a safe path segment")
    with pytest.raises(InvalidInputError) as caught:
        list_parts(LOCAL, str(tmp_path), "")
    assert str(caught.value) == "split must not be empty"


# --- what a step file folded, and a part's identity -------------------------------------


def test_a_footer_without_folded_parts_or_with_a_damaged_entry_folds_nothing() -> None:
    entry = {"name": "0000-1.parquet", "size": 10, "tail": "ab"}
    assert folded_parts(None) == []
    assert folded_parts({}) == []
    assert folded_parts({b"other": b"[]"}) == []
    assert folded_parts({FOLDED_KEY: b"not json"}) == []
    assert folded_parts({FOLDED_KEY: b'{"name": "0000-1.parquet"}'}) == []
    assert folded_parts({FOLDED_KEY: json.dumps([entry, "x", 3]).encode()}) == [entry]
    for other in (b"7", b"null", b'"0000-1.parquet"'):  # JSON, but not a list
        assert folded_parts({FOLDED_KEY: other}) == []


@pytest.mark.parametrize("size", [0, 100, 64 * 1024, 64 * 1024 + 1, 200_000])
def test_a_files_tail_is_its_last_64_kib_and_the_file_is_left_at_its_start(
    tmp_path: Path, size: int
) -> None:
    content = bytes(i * 7 % 251 for i in range(size))
    path = tmp_path / "f"
    path.write_bytes(content)
    with LOCAL.open_input_file(str(path)) as handle:
        assert read_tail(handle) == (size, content[-65536:])
        assert handle.tell() == 0
        assert handle.read(5) == content[:5]


def test_a_parts_identity_is_its_name_size_and_the_hash_of_its_tail(tmp_path: Path) -> None:
    content = bytes(range(256)) * 1000  # 256,000 bytes
    path = tmp_path / "0000-1.parquet"
    path.write_bytes(content)
    assert part_identity(LOCAL, str(path)) == {
        "name": "0000-1.parquet",
        "size": 256_000,
        "tail": hashlib.sha256(content[-65536:]).hexdigest(),
    }


# --- reading one step -------------------------------------------------------------------


def test_a_step_is_its_step_file_then_the_legacy_parts_it_has_not_folded(tmp_path: Path) -> None:
    directory = step_file(tmp_path, tagged(0), step=3).parent
    write_legacy_part(directory, 3, 10, tagged(10))
    write_legacy_part(directory, 3, 2, tagged(2))
    write_legacy_part(directory, 3, 1, tagged(1))
    write_legacy_part(directory, 4, 1, tagged(9))  # another step's
    assert tags(read_step(LOCAL, str(directory), "train", 3)) == [0, 1, 2, 10]
    parts = list_parts(LOCAL, str(directory.parent))
    assert [(p.step, p.part) for p in parts] == [(3, 0), (3, 1), (3, 2), (3, 10), (4, 1)]
    assert tags(read_step(LOCAL, str(directory), "train", 4)) == [9]
    assert read_step(LOCAL, str(directory), "train", 5) == []


def test_a_folded_part_still_on_disk_is_skipped_when_listed_and_read(tmp_path: Path) -> None:
    directory = step_file(tmp_path, tagged(0)).parent
    legacy = Path(write_legacy_part(directory, 0, 1, tagged(1)))
    kept = legacy.read_bytes()
    step_file(tmp_path, tagged(2))  # folds the part into the step file and deletes it
    legacy.write_bytes(kept)  # as a writer that died before the delete leaves it
    assert tags(read_step(LOCAL, str(directory), "train", 0)) == [0, 1, 2]
    assert listed(list_parts(LOCAL, str(directory.parent))) == [("train", 0, 0, "0000.parquet")]
    legacy.write_bytes(kept + b"changed")  # same name, other bytes: not the folded one
    assert [p.part for p in list_parts(LOCAL, str(directory.parent))] == [0, 1]


def test_a_steps_parts_are_its_step_file_and_legacy_parts_by_part_number(
    tmp_path: Path,
) -> None:
    directory = step_file(tmp_path, tagged(0), step=3).parent
    for step, part in [(3, 10), (3, 2), (4, 1)]:
        write_legacy_part(directory, step, part, tagged(part))
    (directory / part_name(3, 5)).mkdir()  # a folder with a part's name is not a part
    assert step_parts(LOCAL, str(directory), "train", 3) == [
        PartFile("train", 3, part, f"{directory}/{part_name(3, part)}") for part in (0, 2, 10)
    ]
    assert step_parts(LOCAL, str(directory), "val", 4) == [
        PartFile("val", 4, 1, f"{directory}/0004-1.parquet")
    ]


def test_a_damaged_legacy_part_is_named_in_the_error(tmp_path: Path) -> None:
    directory = step_file(tmp_path, tagged(0)).parent
    legacy = directory / part_name(0, 1)
    pq.write_table(pa.table({"x": [1]}), legacy)  # parquet, but no trajectory version
    with pytest.raises(CorruptDataError) as caught:
        read_step(LOCAL, str(directory), "train", 0)
    assert str(caught.value).startswith(f"{legacy} has no 'art.trajectory_parquet.version'")


def folded_and_left_behind(root: Path, step: int = 0) -> Path:
    """A step whose legacy part 1 was folded into its step file, and left on disk (a writer
    that died before the delete); the part's path."""
    directory = step_file(root, tagged(0), step).parent
    legacy = Path(write_legacy_part(directory, step, 1, tagged(1)))
    kept = legacy.read_bytes()
    step_file(root, tagged(2), step)  # folds the part and deletes it
    legacy.write_bytes(kept)
    return legacy


def test_a_step_file_that_cannot_be_read_keeps_its_legacy_parts_listed(tmp_path: Path) -> None:
    directory = tmp_path / "trajectories" / "train"
    directory.mkdir(parents=True)
    (directory / part_name(0)).write_bytes(b"not parquet")
    write_legacy_part(directory, 0, 1, tagged(1))
    assert [p.part for p in list_parts(LOCAL, str(directory.parent))] == [0, 1]


def test_an_unreadable_step_file_does_not_stop_the_others_footers_being_read(
    tmp_path: Path,
) -> None:
    """Five steps whose step file is damaged and five whose step file folded its part: each
    step is decided on its own footer, whichever order they are looked at in."""
    root = tmp_path / "store"
    for step in range(5):
        folded_and_left_behind(root, step)
    directory = root / "proj" / "models" / "run-1" / "trajectories" / "train"
    for step in range(5, 10):
        (directory / part_name(step)).write_bytes(b"not parquet")
        write_legacy_part(directory, step, 1, tagged(step))
    listing = [(p.step, p.part) for p in list_parts(LOCAL, str(directory.parent))]
    assert listing == [(s, 0) for s in range(5)] + [(s, p) for s in range(5, 10) for p in (0, 1)]


def test_a_folded_part_left_behind_is_skipped_on_another_filesystem_too(tmp_path: Path) -> None:
    legacy = folded_and_left_behind(tmp_path)
    subtree = pafs.SubTreeFileSystem(str(tmp_path), LOCAL)
    trajectories = "proj/models/run-1/trajectories"
    assert listed(list_parts(subtree, trajectories)) == [("train", 0, 0, "0000.parquet")]
    assert tags(read_step(subtree, f"{trajectories}/train", "train", 0)) == [0, 1, 2]
    assert legacy.exists()


def test_a_legacy_part_of_another_name_than_the_folded_ones_is_read(tmp_path: Path) -> None:
    """An older arthex writing beside a newer one adds `-2` after `-1` was folded."""
    legacy = folded_and_left_behind(tmp_path)
    write_legacy_part(legacy.parent, 0, 2, tagged(7))
    assert tags(read_step(LOCAL, str(legacy.parent), "train", 0)) == [0, 1, 2, 7]
    trajectories = str(legacy.parent.parent)
    assert [p.part for p in list_parts(LOCAL, trajectories)] == [0, 2]


def racing(watched: str, before_open: Callable[[int], None]) -> tuple[pafs.FileSystem, list[int]]:
    """The local disk, where opening the file named `watched` first runs `before_open` with
    the count of its opens so far (what another process does at that moment); the
    filesystem, and the list its opens are counted in. Through fsspec's local filesystem
    (installed with torch and huggingface_hub, not by arthex itself)."""
    local = pytest.importorskip("fsspec.implementations.local")
    base: Any = local.LocalFileSystem
    opens: list[int] = []

    class Racing(base):  # type: ignore[misc]
        cachable = False

        def open(self, path: str, *args: Any, **kwargs: Any) -> Any:
            if Path(path).name == watched:
                opens.append(1)
                before_open(len(opens))
            return super().open(path, *args, **kwargs)

    return pafs.PyFileSystem(pafs.FSSpecHandler(Racing())), opens


def test_a_part_folded_and_deleted_while_the_step_is_read_is_read_once(tmp_path: Path) -> None:
    """A writer folds the legacy part between the listing and its read: the part is gone and
    the open step file is older than the fold, so the read starts over."""
    directory = step_file(tmp_path / "live", tagged(0)).parent
    legacy = Path(write_legacy_part(directory, 0, 1, tagged(1)))
    after = step_file(tmp_path / "folded", tagged(0, 1))  # the step file after the fold

    def fold(count: int) -> None:
        if count == 1:
            shutil.copyfile(after, directory / part_name(0))
            legacy.unlink()

    filesystem, opens = racing(legacy.name, fold)
    assert tags(read_step(filesystem, str(directory), "train", 0)) == [0, 1]
    assert len(opens) == 1


def test_a_folded_part_deleted_while_it_is_listed_is_not_listed(tmp_path: Path) -> None:
    """The next writer deletes the folded part left behind just as a listing checks it."""
    legacy = folded_and_left_behind(tmp_path)

    def delete(_count: int) -> None:
        legacy.unlink()

    filesystem, opens = racing(legacy.name, delete)
    trajectories = str(legacy.parent.parent)
    assert listed(list_parts(filesystem, trajectories)) == [("train", 0, 0, "0000.parquet")]
    assert len(opens) == 1


def test_parts_that_keep_vanishing_are_refused_after_five_reads(tmp_path: Path) -> None:
    directory = step_file(tmp_path, tagged(0)).parent
    legacy = Path(write_legacy_part(directory, 0, 1, tagged(1)))

    def vanish(_count: int) -> None:
        raise FileNotFoundError(str(legacy))

    filesystem, opens = racing(legacy.name, vanish)
    with pytest.raises(CorruptDataError) as caught:
        read_step(filesystem, str(directory), "train", 0)
    assert str(caught.value) == (
        f"the parts of step 0 in {directory} kept changing while being read (5 attempts); "
        "is a writer stuck mid-fold? Read again"
    )
    assert len(opens) == 5
