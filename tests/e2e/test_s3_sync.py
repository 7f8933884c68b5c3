"""A run folder pushed to S3 and pulled back with `arthex.art.utils.s3` (ART's functions, on
pyarrow's S3 filesystem, no `aws` command), against moto's S3 server on loopback reached
through the AWS environment (AWS_ENDPOINT_URL...), as a user's bucket would be.

The oracles: the files on disk (every byte pulled back equals the byte pushed; the keys are
ART's layout, written out here), the checkpoint rule (a step counts once it is whole), and
`aws s3 sync`'s documented rules for `--delete` and `--exclude '{folder}/*'`.
"""

from __future__ import annotations

import asyncio
import io
import os
import secrets
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from arthex.adapters.local.checkpoints import publish
from arthex.adapters.parquet.store import ParquetTrajectoryStore
from arthex.art.errors import ForbiddenBucketCreationError
from arthex.art.utils import s3 as art_s3
from arthex.art.utils import s3_checkpoint_utils as art_steps
from arthex.art.utils.get_model_step import get_step_from_dir
from arthex.core.errors import InvalidInputError, InvalidNameError
from arthex.core.identity import ModelSpec, RunRef
from arthex.testing.builders import make_group, rich_groups
from tests._s3_server import BUCKET, S3

pytestmark = pytest.mark.e2e

PROJECT, NAME = "proj", "agent-1"
TOO_LONG = "b" * 64


@pytest.fixture(scope="module")
def server() -> Iterator[S3]:
    made = S3()
    yield made
    made.stop()


@pytest.fixture
def s3(server: S3, monkeypatch: pytest.MonkeyPatch) -> S3:
    server.use_from_environment(monkeypatch)
    return server


def fresh_prefix() -> str:
    return f"runs-{secrets.token_hex(4)}"


def model_dir(art_path: Path) -> Path:
    return art_path / PROJECT / "models" / NAME


def write_checkpoint(run: Path, step: int, size: int = 3000) -> None:
    """A whole arthex checkpoint (weights, optimizer state, state file last)."""

    def write(folder: Path) -> None:
        (folder / "model.safetensors").write_bytes(os.urandom(size))
        (folder / "optimizer.safetensors").write_bytes(os.urandom(size // 3))

    publish(run, step, write, {"note": f"step {step}"})


def write_art_adapter(run: Path, step: int) -> None:
    """A checkpoint as ART's LocalBackend leaves it: the two PEFT adapter files."""
    folder = run / "checkpoints" / f"{step:04d}"
    folder.mkdir(parents=True)
    (folder / "adapter_model.safetensors").write_bytes(os.urandom(2048))
    (folder / "adapter_config.json").write_text('{"r": 8}')


def make_run(art_path: Path) -> Path:
    """A run folder with everything a run holds: its spec, history, trajectories, arthex and
    ART checkpoints, and a checkpoint still being written (a temp folder)."""
    run = model_dir(art_path)
    store = ParquetTrajectoryStore(art_path)
    ref = RunRef(PROJECT, NAME)
    asyncio.run(store.write(ref, "train", 1, rich_groups()))
    asyncio.run(store.write(ref, "val", 2, [make_group((0.5,))]))
    asyncio.run(store.write_model_spec(ModelSpec(ref, base_model="tiny")))
    (run / "history.jsonl").write_text('{"step": 1, "loss": 0.5}\n{"step": 2, "loss": 0.25}\n')
    write_checkpoint(run, 1)
    write_checkpoint(run, 2)
    write_art_adapter(run, 5)
    in_flight = run / "checkpoints" / ".tmp-0006.123.abcd"
    in_flight.mkdir()
    (in_flight / "model.safetensors").write_bytes(b"half")
    return run


def files_of(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def shared(folder: Path) -> dict[str, bytes]:
    """The files of a run that go to S3: all but writes in progress and local locks."""
    return {k: v for k, v in files_of(folder).items() if ".tmp-" not in k and ".lock" not in k}


def push(
    art_path: Path,
    prefix: str,
    *,
    delete: bool = False,
    verbose: bool = False,
    bucket: str = BUCKET,
) -> None:
    where = str(art_path)
    run = art_s3.push_model_to_s3(NAME, PROJECT, bucket, prefix, verbose, delete, art_path=where)
    asyncio.run(run)


def pull(
    art_path: Path,
    prefix: str | None,
    *,
    step: int | None = None,
    delete: bool = False,
    verbose: bool = False,
    exclude: list[Any] | None = None,
    bucket: str = BUCKET,
) -> str:
    where = str(art_path)
    run = art_s3.pull_model_from_s3(
        NAME, PROJECT, step, bucket, prefix, verbose, delete, art_path=where, exclude=exclude
    )
    return asyncio.run(run)


def base_key(prefix: str) -> str:
    return f"{BUCKET}/{prefix}/{PROJECT}/models/{NAME}"


def test_a_pushed_run_folder_pulls_back_byte_for_byte(
    s3: S3, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = make_run(tmp_path / "here")
    prefix = fresh_prefix()
    push(tmp_path / "here", f"/{prefix}/")  # ART strips the slashes around a prefix
    expected = shared(run)
    assert "trajectories/train/.lock" in files_of(run)  # the local store's split lock
    assert "checkpoints/0002/trainer_state.json" in expected
    assert "trajectories/train/0001.parquet" in expected and "model.json" in expected
    assert s3.keys(base_key(prefix)) == sorted(expected)  # ART's layout, no temp folder
    for relative, data in expected.items():
        assert s3.read(f"{base_key(prefix)}/{relative}") == data

    there = tmp_path / "there"
    returned = pull(there, prefix)
    assert returned == str(model_dir(there))
    assert shared(model_dir(there)) == expected
    assert get_step_from_dir(returned) == 5  # the pulled checkpoints are whole
    capsys.readouterr()
    pull(there, prefix, verbose=True)  # nothing changed on either side: nothing is copied
    push(tmp_path / "here", prefix, verbose=True)
    assert capsys.readouterr().out == ""


def test_only_whole_checkpoints_count_as_steps_on_s3(s3: S3, tmp_path: Path) -> None:
    make_run(tmp_path / "here")
    prefix = fresh_prefix()
    push(tmp_path / "here", prefix)
    # an ART push still in flight: step 7's weights are there, its adapter config not yet;
    # a folder that is not a step at all
    half = f"{base_key(prefix)}/checkpoints/0007/adapter_model.safetensors"
    s3.filesystem.open_output_stream(half).close()
    s3.filesystem.open_output_stream(f"{base_key(prefix)}/checkpoints/notes/readme.txt").close()

    def latest() -> int | None:
        return asyncio.run(
            art_steps.get_latest_checkpoint_step_from_s3(NAME, PROJECT, BUCKET, prefix)
        )

    def not_after(step: int) -> int | None:
        return asyncio.run(
            art_steps.get_checkpoint_step_not_after_from_s3(NAME, PROJECT, step, BUCKET, prefix)
        )

    assert latest() == 5
    assert [not_after(n) for n in (0, 1, 4, 5, 7, 100)] == [None, 1, 2, 5, 5, 5]
    never = art_steps.get_latest_checkpoint_step_from_s3("never-pushed", PROJECT, BUCKET, prefix)
    assert asyncio.run(never) is None

    there = tmp_path / "there"
    pull(there, prefix, step=2)
    assert sorted(files_of(model_dir(there))) == [
        "checkpoints/0002/model.safetensors",
        "checkpoints/0002/optimizer.safetensors",
        "checkpoints/0002/trainer_state.json",
    ]
    with pytest.raises(art_s3.S3SyncError) as refused:
        pull(tmp_path / "elsewhere", prefix, step=7)
    message = str(refused.value)
    assert "\n" not in message
    assert (
        f"s3://{base_key(prefix)}/checkpoints/0007" in message and "no whole checkpoint" in message
    )
    assert not (tmp_path / "elsewhere").exists()  # nothing written


def test_delete_and_exclude_follow_aws_s3_sync(
    s3: S3, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    here = tmp_path / "here"
    run = make_run(here)
    prefix = fresh_prefix()
    push(here, prefix)
    (run / "history.jsonl").unlink()
    (run / "model.json").write_text('{"changed": "and longer than before, so it is copied"}')
    push(here, prefix)  # without delete: a key the folder lacks stays
    assert "history.jsonl" in s3.keys(base_key(prefix))
    assert s3.read(f"{base_key(prefix)}/model.json") == (run / "model.json").read_bytes()
    capsys.readouterr()
    push(here, prefix, delete=True, verbose=True)
    assert "history.jsonl" not in s3.keys(base_key(prefix))
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"delete: s3://{base_key(prefix)}/history.jsonl"]  # unchanged: not copied

    there = tmp_path / "there"
    pulled = model_dir(there)
    pull(there, prefix)
    (pulled / "trajectories" / "train" / "local-only.txt").write_text("mine")
    (pulled / "checkpoints" / "0009").mkdir()
    (pulled / "checkpoints" / "0009" / "trainer_state.json").write_text("{}")
    (pulled / "notes.txt").write_text("mine too")
    s3.filesystem.delete_file(f"{base_key(prefix)}/trajectories/val/0002.parquet")
    pull(there, prefix, delete=True, exclude=["trajectories"])
    assert (pulled / "trajectories" / "train" / "local-only.txt").exists()  # excluded: kept
    assert (pulled / "trajectories" / "val" / "0002.parquet").exists()  # excluded: kept
    assert not (pulled / "notes.txt").exists()
    assert not (pulled / "checkpoints" / "0009").exists()  # no empty step folder left behind
    with pytest.raises(art_s3.S3SyncError, match=r"the source holds no files.*nothing was deleted"):
        pull(there, "never-pushed", delete=True)  # a typo must not empty the local folder
    assert (pulled / "model.json").exists()
    pull(there, prefix, delete=True)
    assert not (pulled / "trajectories" / "train" / "local-only.txt").exists()
    assert not (pulled / "trajectories" / "val").exists()
    gone = "trajectories/val/0002.parquet"
    assert files_of(pulled) == {k: v for k, v in shared(run).items() if k != gone}


def copied(printed: str) -> list[str]:
    """The files a verbose sync printed as copied, relative to the model folder."""
    return [line.split(" to ")[0].rsplit(f"/models/{NAME}/", 1)[1] for line in printed.splitlines()]


def test_a_checkpoints_marker_is_copied_after_its_files(
    s3: S3, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_run(tmp_path / "here")
    prefix = fresh_prefix()
    push(tmp_path / "here", prefix, verbose=True)
    order = copied(capsys.readouterr().out)
    markers = {
        "checkpoints/0001/trainer_state.json",
        "checkpoints/0002/trainer_state.json",
        "checkpoints/0005/adapter_config.json",
        "checkpoints/0005/adapter_model.safetensors",
    }
    assert set(order[-len(markers) :]) == markers and len(order) == len(set(order))
    pull(tmp_path / "there", prefix, verbose=True)
    order = copied(capsys.readouterr().out)
    assert set(order[-len(markers) :]) == markers


def test_excluding_an_unknown_folder_and_unsafe_names_are_refused(s3: S3, tmp_path: Path) -> None:
    make_run(tmp_path)
    with pytest.raises(InvalidInputError, match=r"cannot exclude 'weights'.*'checkpoints'"):
        pull(tmp_path, fresh_prefix(), exclude=["weights"])
    with pytest.raises(InvalidNameError, match=r"model_name '\.\./x'"):
        art_s3.build_s3_path(model_name="../x", project=PROJECT, s3_bucket=BUCKET)
    with pytest.raises(InvalidInputError, match=r"no S3 bucket given.*BACKUP_BUCKET"):
        art_s3.build_s3_path(model_name=NAME, project=PROJECT)
    with pytest.raises(InvalidInputError, match=r"s3_bucket 's3://b' is not a bucket name"):
        art_s3.build_s3_path(model_name=NAME, project=PROJECT, s3_bucket="s3://b")
    with pytest.raises(FileNotFoundError, match=r"local model folder .* does not exist"):
        push(tmp_path / "nothing", fresh_prefix())


def test_buckets_are_created_by_a_push_never_by_a_pull(s3: S3, tmp_path: Path) -> None:
    make_run(tmp_path / "here")
    bucket = f"new-{secrets.token_hex(4)}"
    with pytest.raises(art_s3.S3SyncError, match=rf"the bucket '{bucket}' does not exist"):
        pull(tmp_path / "x", None, bucket=bucket)
    assert not (tmp_path / "x").exists()
    push(tmp_path / "here", "", bucket=bucket)
    assert "model.json" in s3.keys(f"{bucket}/{PROJECT}/models/{NAME}")
    asyncio.run(art_s3.ensure_bucket_exists(bucket))  # exists: nothing to do
    # a name S3 refuses to create (over 63 characters)
    with pytest.raises(
        ForbiddenBucketCreationError, match=rf"could not create the bucket '{TOO_LONG}'"
    ):
        asyncio.run(art_s3.ensure_bucket_exists(TOO_LONG))


def test_a_zipped_step_downloads_from_its_presigned_url(s3: S3, tmp_path: Path) -> None:
    run = make_run(tmp_path)
    prefix = fresh_prefix()
    zipping = art_s3.archive_and_presign_step_url(
        NAME, PROJECT, 2, BUCKET, prefix, art_path=str(tmp_path)
    )
    url = asyncio.run(zipping)
    assert s3.keys(base_key(prefix)) == ["zipped-steps/0002.zip"]
    with urllib.request.urlopen(url, timeout=10) as reply:
        data = reply.read()
    with zipfile.ZipFile(io.BytesIO(data)) as zipped:
        unzipped = {name: zipped.read(name) for name in zipped.namelist()}
    assert unzipped == files_of(run / "checkpoints" / "0002")


def test_checkpoints_of_the_first_layout_move_on_s3(s3: S3, tmp_path: Path) -> None:
    prefix = fresh_prefix()
    old = {
        "0003/adapter_model.safetensors": b"w3",
        "0003/adapter_config.json": b"{}",
        "0004/adapter_model.safetensors": b"w4",
        "0004/adapter_config.json": b"{}",
        "checkpoints/0004/adapter_model.safetensors": b"new4",
        "history.jsonl": b"{}\n",
    }
    for relative, data in old.items():
        with s3.filesystem.open_output_stream(f"{base_key(prefix)}/{relative}") as out:
            out.write(data)
    migrate = art_steps.migrate_s3_checkpoints_to_new_structure
    asyncio.run(migrate(NAME, PROJECT, BUCKET, prefix, dry_run=True))
    assert s3.keys(base_key(prefix)) == sorted(old)
    asyncio.run(migrate(NAME, PROJECT, BUCKET, prefix))
    assert s3.keys(base_key(prefix)) == sorted([
        "0004/adapter_config.json", "0004/adapter_model.safetensors",  # both places: left as is
        "checkpoints/0003/adapter_config.json", "checkpoints/0003/adapter_model.safetensors",
        "checkpoints/0004/adapter_model.safetensors", "history.jsonl",
    ])  # fmt: skip
    assert s3.read(f"{base_key(prefix)}/checkpoints/0003/adapter_model.safetensors") == b"w3"


def test_a_named_profile_gives_the_credentials(
    s3: S3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = make_run(tmp_path / "here")
    credentials = tmp_path / "credentials"
    credentials.write_text("[mine]\naws_access_key_id = testing\naws_secret_access_key = testing\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")  # only the profile holds credentials now
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    prefix = fresh_prefix()
    target = f"s3://{base_key(prefix)}"
    asyncio.run(art_s3.s3_sync(str(run), target, profile="mine"))
    assert s3.keys(base_key(prefix)) == sorted(shared(run))
    with pytest.raises(InvalidInputError) as refused:
        asyncio.run(art_s3.s3_sync(str(run), target, profile="nobody"))
    assert "\n" not in str(refused.value)
    assert str(refused.value).startswith("cannot use the AWS profile 'nobody': ")


def test_art_pull_model_trajectories_brings_back_what_the_loaders_read(
    s3: S3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from arthex.art import Model
    from arthex.art.utils.benchmarking.pull_model_trajectories import pull_model_trajectories

    bucket = f"backups-{secrets.token_hex(4)}"  # ART's key layout has no prefix: a bucket alone
    s3.filesystem.create_dir(bucket)
    pushed = make_run(tmp_path / "pushed")
    asyncio.run(art_s3.push_model_to_s3(NAME, PROJECT, bucket, art_path=str(tmp_path / "pushed")))
    model = Model(name=NAME, project=PROJECT, base_path=str(tmp_path / "here"), report_metrics=[])
    monkeypatch.delenv("BACKUP_BUCKET", raising=False)
    with pytest.raises(InvalidInputError, match=r"needs \$BACKUP_BUCKET"):
        asyncio.run(pull_model_trajectories(model))
    assert not (tmp_path / "here").exists()
    monkeypatch.setenv("BACKUP_BUCKET", bucket)
    asyncio.run(pull_model_trajectories(model))
    expected = {k: v for k, v in shared(pushed).items() if not k.startswith("checkpoints/")}
    assert files_of(model_dir(tmp_path / "here")) == expected
    assert "trajectories/train/0001.parquet" in expected
    assert capsys.readouterr().out.splitlines() == [
        f"Pulling trajectories for model {NAME!r} from S3 bucket {bucket!r}…",
        "Finished pulling trajectories.",
    ]
