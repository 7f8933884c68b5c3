"""ART 0.5.23's `art migrate` and `arthex migrate` (through `arthex.art.cli.app`) on copies
of the same old runs give the same report, exit codes and files (art/cli_script.py, one
script for both): a model directory (verbose, and a dry run), a project of two models kept
beside their JSONL, and a trajectories directory holding a file that cannot be read. The
parquet files each wrote read back to the same rewards and answers. Where the two differ on
purpose (a path that is no run: ART exits 1, arthex 2 with one line; arthex goes through the
files and models in name order, ART in the file system's) the cases leave it out or compare
the lines in any order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .art_env import both_outcomes


def group(reward: float, answer: str) -> dict[str, Any]:
    return {
        "trajectories": [{
            "reward": reward, "metrics": {"turns": 1}, "metadata": {"id": answer}, "logs": [],
            "messages_and_choices": [{"role": "user", "content": "2 + 2?"},
                                     {"role": "assistant", "content": answer}],
            "tools": None, "additional_histories": [],
        }],
        "exceptions": [],
    }  # fmt: skip


RUN = {
    "trajectories/train/0000.jsonl": [group(1.0, "4"), group(0.0, "5")],
    "trajectories/train/0001.jsonl": [group(0.5, "four")],
    "trajectories/val/0001.jsonl": [group(1.0, "4")],
}
INVOCATIONS = [
    {"name": "model", "any_order": True, "files": RUN, "args": ["migrate", "ROOT", "--verbose"]},
    {"name": "dry", "files": RUN, "args": ["migrate", "ROOT", "--dry-run"]},
    {"name": "project", "any_order": True,
     "files": {f"models/{name}/{path}": groups for name in ("m1", "m2")
               for path, groups in RUN.items()},
     "args": ["migrate", "ROOT", "--keep-jsonl", "-v"]},
    {"name": "broken", "files": {**RUN, "trajectories/val/0002.jsonl": []},
     "args": ["migrate", "ROOT/trajectories"]},
]  # fmt: skip


def test_migrate_gives_arts_report_and_files(tmp_path: Path) -> None:
    art, ours = both_outcomes("cli_script", {"root": str(tmp_path), "invocations": INVOCATIONS})
    assert ours == art
    model, dry, project, broken = art
    assert {"Migrated 3 files", "Space saved: X MB (Xx compression)"} <= set(model["stdout"])
    assert model["read_back"]["trajectories/train/0000.parquet"] == [[1.0, "4"], [0.0, "5"]]
    assert dry["read_back"] == {} and len(project["files"]) == 12
    assert broken["exit_code"] == 1 and broken["stderr"][1] == "Errors (1):"


def test_install_skills_and_init_write_to_arts_destinations(tmp_path: Path) -> None:
    """`art install-skills PATH` and `art init PATH` (a folder not made yet): the same report
    and the same files, arthex's SKILL.md being its own text (tests/unit/test_art_cli.py)."""
    invocations = [
        {"name": "skills", "files": {}, "args": ["install-skills", "ROOT"]},
        {"name": "init", "files": {}, "args": ["init", "ROOT/new/project"]},
    ]
    art, ours = both_outcomes("cli_script", {"root": str(tmp_path), "invocations": invocations})
    assert ours == art
    skills, init = art
    assert skills["exit_code"] == 0 and skills["stdout"][0] == "Installed 4 skill files into ROOT:"
    assert [f for f in skills["files"] if f.endswith(".md")] == sorted(
        f"{root}/skills/{name}/SKILL.md"
        for root in (".agents", ".claude")
        for name in ("train-rl", "train-sft")
    )
    assert init["stdout"][1] == "  ROOT/new/project/.claude/skills/train-sft/SKILL.md"
    art_text = (tmp_path / "art" / "skills" / ".claude/skills/train-rl/SKILL.md").read_text()
    ours_text = tmp_path / "arthex.art" / "skills" / ".claude/skills/train-rl/SKILL.md"
    assert "arthex" in ours_text.read_text() and art_text != ours_text.read_text()
