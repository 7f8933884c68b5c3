"""The hexagon's rule, enforced: core and ports import no adapter and no heavy library, and
`import arthex` stays light."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
FORBIDDEN_LIBRARIES = {
    "torch",
    "transformers",
    "peft",
    "vllm",
    "wandb",
    "tinker",
    "pyarrow",
    "polars",
    "fastapi",
    "uvicorn",
    "dependency_injector",
    "httpx",
    "numpy",
    "safetensors",
    "typer",
    "rich",
}
FORBIDDEN_PACKAGES = {"adapters", "container", "cli", "testing", "api"}


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """Every module a file imports, relative imports resolved against the arthex package."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = ["arthex", *path.relative_to(SRC).parent.parts]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            found.append((node.lineno, name))
    return found


def layer_files() -> list[Path]:
    return sorted([*(SRC / "core").rglob("*.py"), *(SRC / "ports").rglob("*.py")])


def test_the_layers_exist() -> None:
    assert len(layer_files()) >= 10


@pytest.mark.parametrize("path", layer_files(), ids=lambda p: str(p.relative_to(SRC)))
def test_core_and_ports_import_no_adapter_and_no_heavy_library(path: Path) -> None:
    offenders = []
    for line, module in imported_modules(path):
        top = module.split(".")[0]
        parts = module.split(".")
        if top in FORBIDDEN_LIBRARIES:
            offenders.append(f"line {line}: {module}")
        if top == "arthex" and len(parts) > 1 and parts[1] in FORBIDDEN_PACKAGES:
            offenders.append(f"line {line}: {module}")
    assert not offenders, f"{path.relative_to(SRC)} breaks the dependency rule: {offenders}"


def test_ports_do_not_import_the_use_cases() -> None:
    for path in (SRC / "ports").rglob("*.py"):
        for line, module in imported_modules(path):
            assert module != "arthex.core.model", f"{path.name}:{line} imports the use cases"


def test_import_arthex_pulls_in_no_heavy_library() -> None:
    code = (
        "import sys, arthex\n"
        "arthex.TrainConfig, arthex.Trajectory, arthex.gather_trajectory_groups\n"
        "heavy = sorted(m for m in ('torch', 'wandb', 'vllm', 'tinker', 'transformers')"
        " if m in sys.modules)\n"
        "print(','.join(heavy))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == ""


# The one place outside the emulators that may name them: the old import path, kept for one
# release with a DeprecationWarning.
EMULATOR_SHIMS = {Path("testing/tinker_emulator.py")}


def test_nothing_in_the_library_imports_the_emulators() -> None:
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        relative = path.relative_to(SRC)
        if relative.parts[0] == "emulators" or relative in EMULATOR_SHIMS:
            continue
        for line, module in imported_modules(path):
            if module.split(".")[:2] == ["arthex", "emulators"]:
                offenders.append(f"{relative}:{line} imports {module}")
    assert not offenders, f"only tests and the emulators' entry points may: {offenders}"
