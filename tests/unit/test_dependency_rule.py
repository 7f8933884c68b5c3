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
            assert module not in {"arthex.core.model", "arthex.core.trainable"}, (
                f"{path.name}:{line} imports the use cases"
            )


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


def test_nothing_in_the_library_imports_the_emulators() -> None:
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        relative = path.relative_to(SRC)
        if relative.parts[0] == "emulators":
            continue
        for line, module in imported_modules(path):
            if module.split(".")[:2] == ["arthex", "emulators"]:
                offenders.append(f"{relative}:{line} imports {module}")
    assert not offenders, f"only tests and the emulators' entry points may: {offenders}"


# -- the rule between the outer rooms: core <- ports <- adapters <- composition <- apps --------

# The adapters a sibling adapter may use: the shared inference server, file helpers, the layout,
# the Hugging Face loading helpers (the offline hub check, quiet progress bars) and the result
# classes `backend.train` returns (train_results: data only, no adapter behind them).
SHARED_ADAPTERS = {"inference", "files", "layout", "hub", "hf_quiet", "listen", "train_results"}
# Two sibling uses, on purpose: a training server's checkpoints are LocalBackend's folders, so
# the Serverless client exports a fetched step with LocalBackend's exporter; and a Tinker
# run's downloaded LoRA adapter is written as a PEFT folder or merged by that same exporter
# (one merge in arthex, not a second one for Tinker). And the run-folder sync (ART's S3
# helpers) reaches S3 as the trajectory store does (its root, object-store kinds and retry
# budget: one S3 layer) and knows a whole checkpoint by LocalBackend's own marker files.
SIBLING_USES = {
    ("adapters/serverless/export.py", "arthex.adapters.local.export"),
    ("adapters/tinker/download.py", "arthex.adapters.local.export"),
    ("adapters/tree_sync.py", "arthex.adapters.local.checkpoints"),
    ("adapters/tree_sync.py", "arthex.adapters.parquet.object_store"),
    ("adapters/tree_sync.py", "arthex.adapters.parquet.retrying"),
    ("adapters/tree_sync.py", "arthex.adapters.parquet.store"),
}


def _room(module: str) -> str | None:
    """`adapters.<x>` for an adapter, else the top-level package of an arthex module."""
    parts = module.split(".")
    if parts[0] != "arthex" or len(parts) < 2:
        return None
    if parts[1] == "adapters" and len(parts) > 2:
        return f"adapters.{parts[2]}"
    return parts[1]


def _rooms_of(relative: Path) -> str:
    return _room(".".join(["arthex", *relative.with_suffix("").parts])) or ""


def outer_files() -> list[tuple[Path, str]]:
    return [
        (path.relative_to(SRC), _rooms_of(path.relative_to(SRC)))
        for path in sorted(SRC.rglob("*.py"))
    ]


def test_adapters_import_no_composition_app_testing_emulator_or_sibling_adapter() -> None:
    offenders = []
    for relative, room in outer_files():
        if not room.startswith("adapters."):
            continue
        for line, module in imported_modules(SRC / relative):
            target = _room(module)
            if target is None or target == room:
                continue
            sibling = target.startswith("adapters.") and target[9:] not in SHARED_ADAPTERS
            if (str(relative), module) in SIBLING_USES:
                continue
            if target in {"composition", "apps", "testing", "emulators", "api", "container"} or (
                sibling
            ):
                offenders.append(f"{relative}:{line} imports {module}")
    assert not offenders, offenders


def test_composition_imports_no_app_testing_or_emulator() -> None:
    offenders = [
        f"{relative}:{line} imports {module}"
        for relative, room in outer_files()
        if room == "composition"
        for line, module in imported_modules(SRC / relative)
        if _room(module) in {"apps", "testing", "emulators"}
    ]
    assert not offenders, offenders


# `arthex.environments` composes the capture (an adapter's hook, through the composition root)
# with the core's use cases: it sits beside the apps, above the composition root.
def test_environments_import_no_app_testing_or_emulator() -> None:
    offenders = [
        f"{relative}:{line} imports {module}"
        for relative, room in outer_files()
        if room == "environments"
        for line, module in imported_modules(SRC / relative)
        if _room(module) in {"apps", "testing", "emulators", "art"}
    ]
    assert not offenders, offenders
    assert any(room == "environments" for _, room in outer_files())


def test_nothing_below_the_environments_imports_them() -> None:
    below = {"core", "ports", "composition", "api", "container"}
    offenders = [
        f"{relative}:{line} imports {module}"
        for relative, room in outer_files()
        if room in below or room.startswith("adapters.")
        for line, module in imported_modules(SRC / relative)
        if _room(module) == "environments"
    ]
    assert not offenders, offenders


def test_the_environments_import_neither_verifiers_nor_openenv_at_import() -> None:
    code = (
        "import sys, arthex, arthex.environments\n"
        "arthex.environments.from_verifiers, arthex.environments.from_openenv\n"
        "print(','.join(sorted(m for m in ('verifiers', 'openenv', 'datasets', 'torch')"
        " if m in sys.modules)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == ""


def test_nothing_below_the_apps_imports_an_app() -> None:
    # `arthex/__init__.py` is the package's face above everything: it names (lazily) what the
    # apps offer users, such as the loaders. The emulators are the server's Tinker protocol
    # run with test settings, so they stand on the app that serves it. `arthex.art` (ART's
    # import paths) is above everything too, nothing imports it (checked below): ART's
    # benchmarking loaders are the apps' loaders.
    offenders = [
        f"{relative}:{line} imports {module}"
        for relative, room in outer_files()
        if room not in {"apps", "__init__", "emulators", "art"}
        for line, module in imported_modules(SRC / relative)
        if _room(module) == "apps"
    ]
    assert not offenders, offenders


def test_no_module_imports_a_private_module_of_another_package() -> None:
    offenders = []
    for relative, _room_name in outer_files():
        here = ".".join(["arthex", *relative.parent.parts])
        for line, module in imported_modules(SRC / relative):
            if not module.startswith("arthex."):
                continue  # the rule is about arthex's own rooms, not how torch names its own
            parent, _, last = module.rpartition(".")
            if relative.parts[0] == "art" and parent == "arthex.art":
                continue  # the ART mirror's files all point into the layer's own table
            if last.startswith("_") and not last.startswith("__") and parent != here:
                offenders.append(f"{relative}:{line} imports {module}")
    assert not offenders, f"a module used by other packages is public; name it so: {offenders}"


# -- ART's import paths (`arthex.art`): a compatibility layer above everything ----------------


def test_nothing_imports_the_art_compatibility_layer() -> None:
    offenders = [
        f"{relative}:{line} imports {module}"
        for relative, room in outer_files()
        if room != "art"
        for line, module in imported_modules(SRC / relative)
        if _room(module) == "art"
    ]
    assert not offenders, f"arthex.art is for ART users' scripts only: {offenders}"


def test_the_art_compatibility_layer_points_only_at_public_modules() -> None:
    from arthex.art import _table

    targets = {
        entry.module
        for entries in _table.MODULES.values()
        for entry in entries.values()
        if isinstance(entry, _table.Use)
    }
    for relative, room in outer_files():
        if room == "art":
            targets |= {m for _, m in imported_modules(SRC / relative) if m.startswith("arthex.")}
    private = sorted(
        t for t in targets - {"arthex.art._table"} if any(p.startswith("_") for p in t.split("."))
    )
    assert not private, f"arthex.art may use anything public, nothing private: {private}"
    assert all(t.startswith("arthex.") for t in targets), targets


# -- the core's two layers: use cases drive the ports, the domain is values and rules ---------

# The three roles the core depends on, one port module each (their facets live there too).
THE_THREE_PORTS = {
    "arthex.ports.trajectory_store",
    "arthex.ports.metrics_reporter",
    "arthex.ports.training_backend",
}
# The use cases: the model and what drives a backend, a store or a reporter for it (ART's
# `backend.train(model, ...)` entry, the pipeline trainer and its parts among them).
USE_CASES = {
    Path("model.py"),
    Path("trainable.py"),
    Path("fine_tuning.py"),
    Path("run_state.py"),
    Path("lease_book.py"),
    Path("pruning.py"),
    Path("backend_train.py"),
    Path("environments.py"),
    Path("evaluation.py"),
}
USE_CASE_PACKAGES = {"pipeline"}


def _is_use_case(relative: Path) -> bool:
    return relative in USE_CASES or relative.parts[0] in USE_CASE_PACKAGES


def _core_files() -> list[Path]:
    return sorted(path.relative_to(SRC / "core") for path in (SRC / "core").rglob("*.py"))


def test_the_core_imports_ports_only_from_the_three_port_modules() -> None:
    offenders = [
        f"core/{relative}:{line} imports {module}"
        for relative in _core_files()
        for line, module in imported_modules(SRC / "core" / relative)
        if module.startswith("arthex.ports") and module not in THE_THREE_PORTS
    ]
    assert not offenders, f"the core depends on three ports only: {offenders}"
    assert {path.stem for path in (SRC / "ports").glob("*.py")} - {"__init__"} == {
        name.rsplit(".", 1)[1] for name in THE_THREE_PORTS
    }


def test_domain_modules_import_no_port_and_no_use_case() -> None:
    use_case_modules = {
        "arthex.core." + ".".join(path.with_suffix("").parts)
        for path in _core_files()
        if _is_use_case(path)
    } | {f"arthex.core.{package}" for package in USE_CASE_PACKAGES}
    assert all((SRC / "core" / path).is_file() for path in USE_CASES)
    offenders = [
        f"core/{relative}:{line} imports {module}"
        for relative in _core_files()
        if not _is_use_case(relative)
        for line, module in imported_modules(SRC / "core" / relative)
        if module.startswith("arthex.ports") or module in use_case_modules
    ]
    assert not offenders, f"domain modules stay below the use cases: {offenders}"


# -- no import circles ------------------------------------------------------------------------


def _module_of(path: Path) -> str:
    parts = ["arthex", *path.relative_to(SRC).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """Module -> the arthex modules it imports (`from pkg import name` counts as importing
    `pkg.name` when that is a module, else `pkg`), TYPE_CHECKING imports included."""
    files = {_module_of(path): path for path in SRC.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    module = ".".join([*base, node.module] if node.module else base)
                else:
                    module = node.module or ""
                targets = [
                    f"{module}.{alias.name}" if f"{module}.{alias.name}" in files else module
                    for alias in node.names
                ]
            graph[name] |= {t for t in targets if t in files and t != name}
    return graph


def test_the_import_graph_has_no_circle() -> None:
    """Between modules; a package's `__init__` re-exporting its own submodules is not a
    circle of the code (what imports it depends on the package)."""
    graph = _import_graph()
    for name, targets in graph.items():  # a package's own facade: edges down into it only
        if (SRC / Path(*name.split(".")[1:]) / "__init__.py").exists():
            graph[name] = {t for t in targets if not t.startswith(name + ".")}
    state: dict[str, int] = {}
    circles: list[list[str]] = []

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                circles.append([*trail[trail.index(target) :], target])
            elif target not in state:
                visit(target, [*trail, target])
        state[node] = 2

    for start in sorted(graph):
        if start not in state:
            visit(start, [start])
    assert not circles, [" -> ".join(circle) for circle in circles]
