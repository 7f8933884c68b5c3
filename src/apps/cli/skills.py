"""`arthex init` and `arthex install-skills`: arthex's skill files for coding assistants.

ART's `art init` / `art install-skills [PATH]`, with their argument and destinations: each
skill in `SKILL_NAMES` is written to `PATH/.claude/skills/{name}/SKILL.md` (Claude Code) and
`PATH/.agents/skills/{name}/SKILL.md` (OpenAI Codex and others reading `.agents`), PATH the
current folder by default and made when missing, as ART does. The files are arthex's own
(arthex/apps/cli/skill_files): how to write an RL or an SFT training script with arthex's API.
Each file is written atomically; an existing one is replaced, as ART's copy replaces it.
PATH that is a file (or under one), or a file in the way of a destination, is one line with
exit code 2, before anything is written; a folder that cannot be written is one line, exit 1.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import typer

from .common import UsageError, fail, one_line_errors

SKILL_NAMES = ["train-sft", "train-rl"]
DESTINATIONS = (Path(".claude") / "skills", Path(".agents") / "skills")


def skill_text(name: str) -> str:
    """The SKILL.md arthex ships for skill `name` (one of SKILL_NAMES)."""
    if name not in SKILL_NAMES:
        raise UsageError(f"no skill named {name!r}; arthex ships {', '.join(SKILL_NAMES)}")
    return resources.files("arthex.apps.cli").joinpath(f"skill_files/{name}/SKILL.md").read_text()


def _install(target: Path) -> list[Path]:
    existing = next(p for p in (target, *target.parents) if p.exists())
    if not existing.is_dir():
        raise UsageError(f"{existing} is a file; pass the project's folder")
    texts = {name: skill_text(name) for name in SKILL_NAMES}
    files = [target / root / name / "SKILL.md" for root in DESTINATIONS for name in SKILL_NAMES]
    for file in files:
        for above in (file, *file.parents):
            if above == target:
                break
            if above.exists() and not (above.is_dir() if above != file else above.is_file()):
                raise UsageError(f"{above} is in the way of {file}; move it aside")
    from ...adapters.files import atomic_write_bytes

    for file in files:
        file.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(file, texts[file.parent.name].encode())
    return files


def install_skills(
    path: Path = typer.Argument(
        Path("."), metavar="PATH", help="The project folder to install the skills into."
    ),
) -> None:
    """Install arthex's skills for Claude Code and OpenAI Codex.

    Writes each skill's SKILL.md under PATH/.claude/skills/ and PATH/.agents/skills/."""
    target = path.resolve()
    with one_line_errors():
        try:
            installed = _install(target)
        except OSError as error:  # no permission, a read-only disk: one line, exit 1
            fail(f"could not write the skills under {target}: {error.strerror or error}", 1)
    typer.echo(f"Installed {len(installed)} skill files into {target}:")
    for file in installed:
        typer.echo(f"  {file}")
    typer.echo("\nUse /train-sft and /train-rl in Claude Code or OpenAI Codex to get started.")


def init(
    path: Path = typer.Argument(Path("."), metavar="PATH", help="The project folder to set up."),
) -> None:
    """Install arthex's skills for coding assistants in a project.

    Writes each skill's SKILL.md under PATH/.claude/skills/ and PATH/.agents/skills/
    (`arthex install-skills` does the same)."""
    install_skills(path)
