"""The `arthex` command as a newcomer meets it: help on `-h`, names instead of Python types,
help text for every option, one-line parser errors, `--version`, and help that agrees with the
docs. In-process: the click objects the entry point runs, their output captured."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import arthex
from arthex.apps.cli import serve
from arthex.apps.cli.common import ONLY_ONE, arthex_command
from arthex.apps.cli.main import command
from arthex.apps.demo.life import SFT_RL_STEPS
from arthex.apps.demo.rl import DEFAULT_STEPS
from arthex.apps.demo.task import step_line

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = (
    *("demo", "version", "history", "plot", "trajectories"),
    *("runs", "prune", "export", "eval", "view", "serve", "doctor", "migrate", "init"),
)
HIDDEN = ("install-skills",)  # ART's other name for init: it runs, unlisted
PYTHON_TYPE = re.compile(r"<[a-z_.]+(\[[^>]*\])?( range)?>")  # <bool>, <list[int]>, <path>, ...


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as stopped:
        command().main(args, prog_name="arthex")
    out, err = capsys.readouterr()
    code = stopped.value.code
    return (code if isinstance(code, int) else 1), out, err


def commands() -> dict[str, Any]:
    group = command()
    found = {name: group.commands[name] for name in COMMANDS if name != "serve"}
    found["serve"] = serve.command()
    return found


@pytest.fixture
def narrow(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")


@pytest.mark.parametrize("name", [*COMMANDS, *HIDDEN])
@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_every_command_answers_h_in_80_columns_without_python_types(
    name: str, flag: str, narrow: None, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run([name, flag], capsys)
    assert code == 0, err
    assert out.startswith(f"Usage: arthex {name} ")
    assert PYTHON_TYPE.search(out) is None, PYTHON_TYPE.search(out)
    assert max(len(line) for line in out.splitlines()) <= 80


def test_the_group_lists_every_command_whole_in_80_columns(
    narrow: None, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(["-h"], capsys)
    assert code == 0
    listed = out.split("Commands:\n", 1)[1]
    for name in COMMANDS:
        (line,) = [line for line in listed.splitlines() if line.split()[:1] == [name]]
        assert not line.endswith("..."), f"the summary of {name} is cut: {line!r}"
    assert PYTHON_TYPE.search(out) is None and "--version" in out


@pytest.mark.parametrize("name", COMMANDS)
def test_every_option_and_argument_has_help_and_a_name_for_its_value(name: str) -> None:
    for param in commands()[name].params:
        assert param.help, f"arthex {name}: {param.name} has no help text"
        if getattr(param, "is_flag", False) or param.name == "help":
            continue
        assert param.metavar, f"arthex {name}: {param.name} shows its Python type"
        assert PYTHON_TYPE.search(param.metavar) is None


def test_version_flag_and_command_print_the_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["--version"], capsys)[:2] == (0, f"{arthex.__version__}\n")
    assert run(["version"], capsys)[:2] == (0, f"{arthex.__version__}\n")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["history", "--last", "0"], "'--last'"),
        (["prune", "--pin", "x"], "'--pin'"),
        (["plot", "--bogus"], "--bogus"),
        (["serve", "--port", "99999"], "from 0 to 65535"),
        (["serve", "--max-body-bytes", "١٢"], "expected a whole number"),
    ],
)
def test_a_parser_error_is_one_line_with_exit_code_2(
    args: list[str], fragment: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(args, capsys)
    assert code == 2 and out == ""
    (line,) = err.splitlines()
    assert line.startswith("arthex: error: ") and fragment in line
    assert line.endswith(f"(see {arthex_command()} {args[0]} -h)")


@pytest.mark.parametrize(
    "args", [["export"], ["history", "--bogus"], ["demo", "--steps", "x"], ["nosuch"]]
)
def test_the_parsers_errors_speak_in_arthexs_lower_case(
    args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(args, capsys)
    (line,) = err.splitlines()
    message = line.removeprefix("arthex: error: ")
    assert code == 2 and message[0] == message[0].lower(), line  # "missing option '--out'"
    assert not message.split(" (see ", 1)[0].endswith("."), line


def test_the_demos_step_bounds_in_its_help_are_the_ones_it_enforces(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, out, _ = run(["demo", "-h"], capsys)
    helped = " ".join(out.split())
    assert "x>=1" not in helped and "at least 3" in helped and "at least 1 with --sft" in helped
    for args in (["--steps", "2"], ["--sft", "--steps", "0"]):
        code, _, err = run(["demo", *args], capsys)
        assert code == 2 and "at least" in err and len(err.splitlines()) == 1, err


def test_prune_refuses_dry_run_and_yes_together_before_looking_at_any_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(["prune", "--base-path", str(tmp_path), "--dry-run", "--yes"], capsys)
    assert code == 2 and out == ""
    (line,) = err.splitlines()
    assert "--dry-run and --yes contradict each other" in line


def test_the_docs_say_how_prune_picks_a_model_as_its_help_does(
    capsys: pytest.CaptureFixture[str],
) -> None:
    section = (ROOT / "docs" / "cli.md").read_text().split("## `arthex prune`", 1)[1]
    section = " ".join(section.split("\n## ", 1)[0].split())
    assert ONLY_ONE in section
    assert "arthex prune [MODEL]" in section
    _, out, _ = run(["prune", "-h"], capsys)
    assert ONLY_ONE in " ".join(out.split())


def test_the_readme_and_the_cli_page_name_every_command_there_is() -> None:
    registered = set(command().list_commands(None))
    assert registered == {*COMMANDS, *HIDDEN}
    table = (ROOT / "docs" / "cli.md").read_text().split("## Naming a model", 1)[0]
    assert set(re.findall(r"^\| `arthex ([\w-]+)`", table, re.MULTILINE)) == registered
    readme = " ".join((ROOT / "README.md").read_text().split())
    listed = readme.split("`arthex -h` lists the other commands: ", 1)[1].split(")", 1)[0]
    assert set(re.findall(r"`(\w+)`", listed)) | {"plot"} == set(COMMANDS)


def test_the_demo_help_names_the_demos_own_step_counts(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(["demo", "-h"], capsys)
    assert f"Default: {DEFAULT_STEPS} ({SFT_RL_STEPS} with --sft)" in " ".join(out.split())


def test_a_demo_line_names_the_history_steps_and_why_nothing_trained() -> None:
    trained = step_line(0, 0.053, {"loss/train": 0.125, "data/step_num_gradient_steps": 2}, 3)
    assert trained == "step   0  reward 0.053  -> step 1: loss +0.125"
    idle = step_line(7, 1.0, {"data/step_num_gradient_steps": 0.0}, 0)
    assert idle == (
        "step   7  reward 1.000  -> step 8: nothing to train: all rewards equal in every group"
    )
    # a backend that reports a loss for an update without a gradient step: still nothing trained
    fake = step_line(7, 0.5, {"loss/train": 0.0, "data/step_num_gradient_steps": 0.0}, 2)
    assert fake.endswith("nothing to train: no trainable tokens in the batch")
