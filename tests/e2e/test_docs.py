"""The documentation's code runs: marked code blocks in docs/, and the examples.

Convention for docs/*.md (and docs/backends/*.md): put an HTML comment on the line before a
fenced block to make it a test.

- `<!-- test -->` before a ```python block: the page's marked blocks run in order in one
  namespace and on one event loop, like notebook cells, in a fresh working directory;
  top-level `await` works. A block fails the test by raising (use `assert`).
- `<!-- test: pytest -->` before a ```python block: the block is written to a test file and
  run with pytest in a subprocess; every test in it must pass.
- `<!-- test: envs -->` before a ```python block: a block that needs the `envs` extra
  (verifiers, openenv), which lives in a venv of its own: skipped here, the page's `envs`
  blocks run in order, as cells, by tests/environments/test_docs_envs.py in that venv.

Unmarked blocks (bash, sketches with placeholders) are not run.
"""

from __future__ import annotations

import ast
import asyncio
import json
import os
import re
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
EXAMPLES = ROOT / "examples"
MARKED_BLOCK = re.compile(
    r"^<!--\s*test(?::\s*(?P<kind>[a-z]+))?\s*-->\s*\n```python[^\n]*\n(?P<code>.*?)^```",
    re.MULTILINE | re.DOTALL,
)
# Pages whose blocks train the tiny model on the LocalBackend: seconds, not milliseconds.
SLOW_PAGES = {
    *("quickstart.md", "sft-and-export.md", "pipeline.md", "backends/local.md"),
    "evaluating.md",
}

pytestmark = pytest.mark.e2e


def marked_blocks(page: Path) -> list[tuple[str, int, str]]:
    """(kind, first line number, code) of every marked block of a page."""
    text = page.read_text()
    return [
        (m.group("kind") or "python", text[: m.start("code")].count("\n") + 1, m.group("code"))
        for m in MARKED_BLOCK.finditer(text)
    ]


def pages() -> list[Any]:
    """The pages that have marked blocks (the others are prose and shell sessions)."""
    params = []
    for page in sorted(DOCS.rglob("*.md")):
        if not marked_blocks(page):
            continue
        name = str(page.relative_to(DOCS))
        marks = [pytest.mark.slow] if name in SLOW_PAGES else []
        params.append(pytest.param(page, id=name, marks=marks))
    return params


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A fresh working directory and no wandb credentials, so `report_metrics=None` means no
    mirror and nothing leaves the machine."""
    for key in list(os.environ):
        if key.startswith("WANDB_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_docs_hold_marked_blocks() -> None:
    """A typo in a marker would silently turn a page's tests off: count them."""
    counted = {str(p.relative_to(DOCS)): len(marked_blocks(p)) for p in DOCS.rglob("*.md")}
    for page in ("quickstart.md", "concepts.md", "migrating-from-art.md", "backend-authors.md"):
        assert counted.get(page, 0) >= 1, f"docs/{page} has no block marked <!-- test -->"
    loose = [
        f"{page}:{text[: m.start()].count(chr(10)) + 1}"
        for page, text in ((p.name, p.read_text()) for p in DOCS.rglob("*.md"))
        for m in re.finditer(r"<!--\s*test[^>]*-->\s*\n(?!```python)", text)
    ]
    assert not loose, f"test markers not followed by a ```python block: {loose}"


@pytest.mark.parametrize("page", pages())
def test_marked_blocks_of_a_page_run(page: Path, clean_env: Path) -> None:
    blocks = marked_blocks(page)
    namespace: dict[str, Any] = {"__name__": f"docs_{page.stem.replace('-', '_')}"}
    loop = asyncio.new_event_loop()
    try:
        for kind, line, code in blocks:
            where = f"{page.relative_to(ROOT)}:{line}"
            if kind == "pytest":
                run_as_pytest_file(code, where, clean_env)
            elif kind == "envs":
                continue  # in the envs venv: tests/environments/test_docs_envs.py
            elif kind == "python":
                run_cell(code, where, namespace, loop)
            else:
                pytest.fail(f"{where}: unknown test marker kind {kind!r}")
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


def run_cell(
    code: str, where: str, namespace: dict[str, Any], loop: asyncio.AbstractEventLoop
) -> None:
    """Run one block like a notebook cell: top-level await on the page's loop."""
    # Line numbers in tracebacks point into the page: pad the code to its first line.
    padded = "\n" * (int(where.rsplit(":", 1)[1]) - 1) + code
    compiled = compile(
        padded, where.rsplit(":", 1)[0], "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    )
    result = eval(compiled, namespace)  # the docs' own code
    if asyncio.iscoroutine(result):
        loop.run_until_complete(result)


def run_as_pytest_file(code: str, where: str, directory: Path) -> None:
    test_file = directory / f"test_docs_block_{abs(hash(where))}.py"
    test_file.write_text(code)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test_file)],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, f"{where}: the block's tests failed:\n{result.stdout[-4000:]}"
    assert " passed" in result.stdout and " failed" not in result.stdout, result.stdout[-2000:]


# --- the examples -----------------------------------------------------------------------------


def run_example(name: str, argv: list[str], monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setattr(sys, "argv", [str(EXAMPLES / name), *argv])
    return runpy.run_path(str(EXAMPLES / name), run_name="__main__")


def test_analyze_run_loads_a_run_and_plots_it(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import matplotlib.image

    from tests.e2e.test_cli import VAL_REWARDS, build_runs

    asyncio.run(build_runs(clean_env / ".art"))
    before = set(os.listdir(clean_env))
    run_example("analyze_run.py", [], monkeypatch)
    out = capsys.readouterr().out
    assert "proj/agent" in out  # it picked the most recently updated run by itself
    assert set(os.listdir(clean_env)) == before  # nothing in the current directory
    run_dir = clean_env / ".art" / "proj" / "models" / "agent"
    for folder in (run_dir, clean_env / "elsewhere" / "analysis"):
        if folder != run_dir:
            run_example("analyze_run.py", ["--out-dir", str(folder)], monkeypatch)
        pixels = matplotlib.image.imread(folder / "analysis.png")
        assert pixels.ndim == 3 and pixels.shape[0] > 300 and pixels.shape[1] > 300
        summary = json.loads((folder / "analysis.json").read_text())
        val = [row for row in summary["rewards"] if row["split"] == "val"]
        assert [row["step"] for row in val] == [0, 1, 2, 3]
        assert [row["mean"] for row in val] == pytest.approx(VAL_REWARDS)
        assert summary["tool_call_rate"]["val"] == pytest.approx(1.0)


@pytest.mark.slow
def test_tool_agent_trains_a_few_steps_on_cpu(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import polars as pl

    from arthex.apps.loaders import load_history, load_trajectories

    run_example(
        "tool_agent.py", ["--steps", "2", "--base-path", str(clean_env / ".art")], monkeypatch
    )
    out = capsys.readouterr().out
    assert "step 0: reward" in out and "step 1: reward" in out
    model_dir = clean_env / ".art" / "tools" / "models" / "weather-agent"
    history = load_history(model_dir)
    assert history.filter(pl.col("loss/train").is_not_null())["step"].to_list() == [1, 2]
    trajectories = load_trajectories(model_dir, split="train").collect()
    assert trajectories.height == 2 * 3 * 4  # steps x cities x rollouts
    tools = {json.loads(t)[0]["function"]["name"] for t in trajectories["tools"]}
    assert tools == {"get_weather"}  # the tools offered were stored with each trajectory
    rewards = trajectories["reward"].to_list()
    assert all(0.0 <= r <= 1.0 for r in rewards)


def test_tool_agent_rewards_the_right_tool_call() -> None:
    """The reward paths a tiny random model rarely reaches, checked on built Choices."""
    from arthex.testing.builders import make_choice

    agent = runpy.run_path(str(EXAMPLES / "tool_agent.py"), run_name="tool_agent")
    score = agent["score"]

    def call(name: str, arguments: str) -> Any:
        return make_choice(None, tool_calls=[{"name": name, "arguments": arguments}])

    assert score(call("get_weather", '{"city": "Oslo"}'), "Oslo") == (1.0, True)
    assert score(call("get_weather", '{"city": "Lima"}'), "Oslo") == (0.5, True)
    assert score(call("get_weather", "not json"), "Oslo") == (0.5, True)
    assert score(call("get_time", "{}"), "Oslo") == (0.0, False)
    assert score(make_choice('{"a": 1}'), "Oslo") == (0.5 * 5 / 7, False)  # {"":} of {"a":1}
    assert score(make_choice(""), "Oslo") == (0.0, False)


# --- the README's training loop ---------------------------------------------------------------


@pytest.mark.slow
def test_the_readmes_training_loop_runs_as_a_program(clean_env: Path) -> None:
    """The README's "A training loop" block, saved as a file and run with `python`, as a
    reader would: it trains the tiny model for its STEPS and exits on its own."""
    section = (ROOT / "README.md").read_text().split("## A training loop", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match is not None, "README.md has no python block under 'A training loop'"
    program = clean_env / "train.py"
    program.write_text(match.group(1))
    done = subprocess.run(
        [sys.executable, str(program)],
        cwd=clean_env,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": ""},
    )
    assert done.returncode == 0, done.stderr[-4000:]
    history = clean_env / ".art" / "support-bot" / "models" / "agent-001" / "history.jsonl"
    rows = [json.loads(line) for line in history.read_text().splitlines()]
    assert sorted({r["step"] for r in rows if "train/reward" in r}) == [0, 1, 2]
    assert sorted({r["step"] for r in rows if "val/reward" in r}) == [1, 2, 3]
    assert sorted({r["step"] for r in rows if "loss/train" in r}) == [1, 2, 3]
