"""`art.cli` under arthex: `app` is the `arthex` command line (serve included), `migrate` is
`arthex migrate` with ART's options and report, `run` is `arthex serve --protocol art`,
`help_command` prints `arthex --help`, `init` and `install_skills` write arthex's own skill
files where ART writes its; the GPU runtime commands are refused in one line. The migrated
files are read back and compared with the groups written by hand as JSONL; the report's
numbers are the files' sizes, worked out here."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import arthex
import arthex.art.cli as art_cli
from arthex.apps.cli.main import app as arthex_app
from arthex.art.utils.trajectory_logging import read_trajectory_groups_parquet

RUNNER = CliRunner()


def group(reward: float, answer: str) -> dict[str, Any]:
    """One line of an old ART run's `trajectories/{split}/{step:04d}.jsonl`."""
    return {
        "trajectories": [
            {
                "reward": reward,
                "metrics": {"turns": 1},
                "metadata": {},
                "messages_and_choices": [
                    {"role": "user", "content": "2 + 2?"},
                    {"role": "assistant", "content": answer},
                ],
                "tools": None,
                "additional_histories": [],
                "logs": [],
            }
        ],
        "exceptions": [],
    }


def write_run(run: Path, steps: dict[str, list[dict[str, Any]]]) -> dict[str, int]:
    """JSONL files under `run/trajectories/`, keyed `split/step`; their sizes in bytes."""
    sizes = {}
    for key, groups in steps.items():
        path = run / "trajectories" / f"{key}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(g) + "\n" for g in groups))
        sizes[key] = path.stat().st_size
    return sizes


def answers(parquet: Path) -> list[tuple[float, str]]:
    return [
        (t.reward, str(t.messages()[-1]["content"]))
        for g in read_trajectory_groups_parquet(parquet)
        for t in g.trajectories
    ]


def invoke(*args: str) -> Any:
    return RUNNER.invoke(art_cli.app, [*args])


def test_app_is_the_arthex_command_line_with_migrate_and_serve() -> None:
    assert art_cli.app is arthex_app
    listed = invoke("--help")
    assert listed.exit_code == 0
    commands = listed.stdout.split("Commands:")[1].split()
    assert {"migrate", "serve", "history", "runs"} <= set(commands)


def test_a_model_directory_is_migrated_file_by_file(tmp_path: Path) -> None:
    run = tmp_path / "proj" / "models" / "agent"
    write_run(run, {"train/0000": [group(1.0, "4"), group(0.0, "5")], "val/0001": [group(1, "4")]})
    done = invoke("migrate", str(run), "--verbose")
    assert done.exit_code == 0, done.output
    lines = done.stdout.splitlines()
    assert lines[:3] == [
        f"Migrating model directory: {run}",
        f"  {run}/trajectories/train/0000.jsonl",
        f"  {run}/trajectories/val/0001.jsonl",
    ]
    assert lines[3:5] == ["", "Migrated 2 files"] and lines[5].startswith("Space saved: ")
    assert answers(run / "trajectories" / "train" / "0000.parquet") == [(1.0, "4"), (0.0, "5")]
    assert answers(run / "trajectories" / "val" / "0001.parquet") == [(1.0, "4")]
    assert sorted(p.name for p in run.rglob("*.jsonl")) == []


def test_a_dry_run_estimates_a_25th_and_changes_nothing(tmp_path: Path) -> None:
    run = tmp_path / "agent"
    sizes = write_run(run, {"train/0000": [group(1.0, "4")] * 2000})
    done = invoke("migrate", str(run), "-n")
    before = sizes["train/0000"]
    saved_mib = (before - before // 25) / 1024 / 1024
    assert done.stdout.splitlines()[-2:] == [
        "[DRY RUN] Would migrate 1 files",
        f"  Estimated space savings: {saved_mib:.1f} MB",
    ]
    assert saved_mib > 0.1 and not list(run.rglob("*.parquet"))


def test_a_project_keeps_its_jsonl_when_asked_and_names_each_model(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    for name in ("b-model", "a-model"):
        write_run(project / "models" / name, {"train/0003": [group(0.5, name)]})
    (project / "models" / "notes.txt").write_text("not a model")
    done = invoke("migrate", str(project), "--keep-jsonl", "-v")
    assert done.exit_code == 0, done.output
    assert done.stdout.splitlines()[:5] == [
        f"Migrating project directory: {project}",
        "Processing model: a-model",
        f"    {project}/models/a-model/trajectories/train/0003.jsonl",
        "Processing model: b-model",
        f"    {project}/models/b-model/trajectories/train/0003.jsonl",
    ]
    assert len(list(project.rglob("*.jsonl"))) == len(list(project.rglob("*.parquet"))) == 2


def test_a_trajectories_directory_and_a_broken_file_listed_at_the_end(tmp_path: Path) -> None:
    run = tmp_path / "agent"
    write_run(run, {"train/0000": [group(1.0, "4")]})
    broken = run / "trajectories" / "train" / "0001.jsonl"
    broken.write_text("{not json\n")
    done = invoke("migrate", str(run / "trajectories"))
    assert done.exit_code == 1
    assert done.stdout.splitlines()[:3] == [
        f"Migrating trajectories directory: {run / 'trajectories'}",
        "",
        "Migrated 1 files",
    ]
    errors = done.stderr.splitlines()
    assert errors[:2] == ["", "Errors (1):"] and errors[2].startswith(f"  Error migrating {broken}")
    assert broken.exists() and (run / "trajectories" / "train" / "0000.parquet").exists()


@pytest.mark.parametrize("kind", ["missing", "unknown"])
def test_a_path_that_is_no_run_is_one_line_and_exit_2(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "nothing"
    if kind == "unknown":
        path.mkdir()
        (path / "readme.txt").write_text("hi")
    done = invoke("migrate", str(path))
    assert done.exit_code == 2 and done.stdout == ""
    assert done.stderr.startswith(f"arthex: error: {path} ") and done.stderr.count("\n") == 1


def test_run_serves_arts_api_on_loopback_and_refuses_an_open_host(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as stopped:
        art_cli.run(host="0.0.0.0", port=7999)
    assert stopped.value.code == 2
    said = capsys.readouterr().err
    assert said.startswith("arthex: error: --host '0.0.0.0' is not a loopback address")
    assert said.count("\n") == 1 and "--insecure-bind" in said


def test_help_command_prints_the_arthex_commands(capsys: pytest.CaptureFixture[str]) -> None:
    art_cli.help_command()
    shown = capsys.readouterr().out
    assert shown.startswith("Usage: arthex [OPTIONS] COMMAND [ARGS]...")
    assert "  migrate  " in shown and "  serve  " in shown


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("runtime_app", "arthex doctor"),
        ("runtime_status", "arthex doctor"),
        ("runtime_prepare", "arthex[vllm]"),
    ],
)
def test_the_gpu_runtime_commands_are_refused_in_one_line(name: str, says: str) -> None:
    with pytest.raises(ImportError) as refused:
        getattr(art_cli, name)
    message = str(refused.value)
    assert message.startswith(f"ART's art.cli.{name} is not in arthex: ") and says in message
    assert "\n" not in message


SKILL_FILES = [
    f"{root}/skills/{name}/SKILL.md"
    for root in (".claude", ".agents")
    for name in ("train-sft", "train-rl")
]


def test_install_skills_writes_arthexs_skills_for_claude_and_codex(tmp_path: Path) -> None:
    done = invoke("install-skills", str(tmp_path))
    assert done.exit_code == 0, done.output
    assert done.stdout.splitlines()[0] == f"Installed 4 skill files into {tmp_path.resolve()}:"
    assert art_cli.SKILL_NAMES == ["train-sft", "train-rl"]
    for relative in SKILL_FILES:
        text = (tmp_path / relative).read_text()
        header = text.split("---\n")[1]
        name = relative.split("/")[2]
        assert f"name: {name}\n" in header and "description: " in header
        assert "arthex" in text and "import arthex" in text
        # each `arthex.NAME` the skill tells the assistant to call exists
        for called in set(re.findall(r"\barthex\.([A-Za-z_]+)", text)):
            assert hasattr(arthex, called) or called == "rewards", called
    # a second run replaces the files, as ART's copy does; init is install-skills
    (tmp_path / SKILL_FILES[0]).write_text("old")
    assert invoke("init", str(tmp_path)).exit_code == 0
    assert (tmp_path / SKILL_FILES[0]).read_text().startswith("---\nname: train-sft")


def test_a_file_in_the_way_is_one_line_and_nothing_is_written(tmp_path: Path) -> None:
    (tmp_path / "notes").write_text("x")
    done = invoke("install-skills", str(tmp_path / "notes"))
    assert done.exit_code == 2 and "is a file; pass the project's folder" in done.stderr
    done = invoke("init", str(tmp_path / "notes" / "project"))
    assert done.exit_code == 2 and "notes is a file" in done.stderr
    (tmp_path / ".agents").write_text("x")
    done = invoke("init", str(tmp_path))
    assert done.exit_code == 2 and ".agents is in the way of" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [".agents", "notes"]


def test_the_skill_files_ship_in_the_package_and_their_code_parses() -> None:
    import ast
    import fnmatch
    import tomllib

    root = Path(__file__).resolve().parents[2]
    globs = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]["arthex"]
    for name in art_cli.SKILL_NAMES:
        relative = f"apps/cli/skill_files/{name}/SKILL.md"
        assert any(fnmatch.fnmatch(relative, glob) for glob in globs), relative
        text = (root / "src" / relative).read_text()
        blocks = re.findall(r"```python\n(.*?)```", text, re.DOTALL)
        assert blocks, name
        for block in blocks:
            ast.parse(block)


def test_a_folder_that_cannot_be_written_is_one_line_and_exit_1(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:
        target = locked
        if os.access(locked, os.W_OK):  # root writes anywhere, but not into /proc
            if not Path("/proc/self").is_dir():
                pytest.skip("root, and no /proc to refuse a write")
            target = Path("/proc/self")
        done = invoke("install-skills", str(target))
        assert done.exit_code == 1 and "could not write the skills under" in done.stderr
        assert len(done.stderr.splitlines()) == 1
    finally:
        locked.chmod(0o700)
