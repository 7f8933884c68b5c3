"""ART's import paths under `arthex.art`: every public module of the openpipe-art 0.5.23 wheel
imports there (or is refused in one line), and every one of ART's public names in it is
arthex's own object or a one-line refusal that names something real to use instead.

The list of ART's modules and names was read from the installed wheel by
tests/interop/art/public_paths.py (run by ART's interpreter) and is kept in
tests/unit/data/art_0_5_23_paths.json; the interop suite re-reads the wheel so a drift shows.
"""

from __future__ import annotations

import ast
import asyncio
import importlib
import inspect
import json
import re
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import arthex
import arthex.art as art
import arthex.rewards
import arthex.utils
from arthex.art import _table
from arthex.core.errors import NotInArthexError

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "art"
RECORDED = json.loads((Path(__file__).parent / "data" / "art_0_5_23_paths.json").read_text())
ART_MODULES: dict[str, list[str]] = RECORDED["modules"]


def arthex_path(path: str) -> str:
    return f"arthex.{path}"


def importable() -> list[str]:
    return [p for p in ART_MODULES if _table.refused_module(p) is None]


def art_names() -> Iterator[tuple[str, str]]:
    for path in importable():
        for name in ART_MODULES[path]:
            yield path, name


def check_refusal(error: BaseException, what: str) -> None:
    """One line, naming ART's path, saying what to use instead, and where the guide is."""
    message = str(error)
    assert isinstance(error, NotInArthexError) and isinstance(error, ImportError), repr(error)
    assert "\n" not in message, message
    assert message.startswith(f"ART's {what} is not in arthex: "), message
    instead = message.split(" is not in arthex: ", 1)[1]
    assert len(instead.removesuffix(f" (see {_table.GUIDE})")) > 20, message
    assert message.endswith(f"(see {_table.GUIDE})"), message


# -- the list itself ---------------------------------------------------------------------------


def test_the_list_is_art_0_5_23s_and_holds_the_paths_users_import() -> None:
    assert RECORDED["version"] == "0.5.23"
    # the paths an ART user's scripts, ART's skill files and NVIDIA's NAT plugin import
    expected = {
        "art": ["Model", "TrainableModel", "get_tokenizer", "tokenize", "yield_trajectory"],
        "art.dev": ["InternalModelConfig", "InitArgs", "EngineArgs", "TrainerArgs"],
        "art.dev.openai_server": ["OpenAIServerConfig"],
        "art.types": ["TrainConfig", "TrainSFTConfig"],
        "art.trajectories": ["Trajectory", "TrajectoryGroup"],
        "art.backend": ["Backend"],
        "art.pipeline_trainer": ["PipelineTrainer"],
        "art.utils.sft": ["train_sft_from_file"],
        "art.serverless.backend": ["ServerlessBackend"],
        "art.langgraph": ["wrap_rollout", "init_chat_model"],
        "art.yield_trajectory": ["capture_yielded_trajectory", "yield_trajectory"],
    }
    for path, names in expected.items():
        assert set(names) <= set(ART_MODULES[path]), path
    assert len(ART_MODULES) > 300


def test_the_table_covers_every_recorded_path_and_invents_none() -> None:
    for path, names in ART_MODULES.items():
        if _table.refused_module(path) is not None:
            assert path not in _table.MODULES, f"{path} is both refused and importable"
            continue
        assert path in _table.MODULES, f"ART's module {path} is missing from arthex.art"
        assert set(names) <= set(_table.MODULES[path]), (
            f"{path}: ART's names missing from arthex.art: "
            f"{sorted(set(names) - set(_table.MODULES[path]))}"
        )
    every_path = [*_table.MODULES, *_table.REFUSED_MODULES, *_table.REFUSED_PACKAGES]
    # ART's folders without an __init__.py (art.utils.benchmarking) import as namespaces
    folders = {parent for path in ART_MODULES for parent in _parents(path)}
    assert set(every_path) <= set(ART_MODULES) | folders, set(every_path) - set(ART_MODULES)
    for path, entries in _table.MODULES.items():
        assert set(entries) <= set(ART_MODULES[path]), (path, set(entries) - set(ART_MODULES[path]))


# -- importing ----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", list(ART_MODULES))
def test_every_art_module_imports_or_is_refused_in_one_line(path: str) -> None:
    instead = _table.refused_module(path)
    if instead is None:
        module = importlib.import_module(arthex_path(path))
        assert module.__name__ == arthex_path(path)
        return
    with pytest.raises(NotInArthexError) as caught:
        importlib.import_module(arthex_path(path))
    refused = next(p for p in [path, *_parents(path)] if p in _table.REFUSED_MODULES or p in
                   _table.REFUSED_PACKAGES)  # fmt: skip
    check_refusal(caught.value, f"module {refused}")
    assert instead in str(caught.value)


def _parents(path: str) -> list[str]:
    parts = path.split(".")
    return [".".join(parts[:i]) for i in range(len(parts) - 1, 0, -1)]


@pytest.mark.parametrize(
    ("path", "name"), list(art_names()), ids=[f"{p}.{n}" for p, n in art_names()]
)
def test_every_art_name_resolves_or_is_refused_in_one_line(path: str, name: str) -> None:
    module = importlib.import_module(arthex_path(path))
    entry = _table.MODULES[path][name]
    if isinstance(entry, _table.Use):
        assert getattr(module, name) is entry.resolve()
        namespace: dict[str, Any] = {}
        exec(f"from {arthex_path(path)} import {name}", namespace)
        assert namespace[name] is getattr(module, name)
        return
    with pytest.raises(NotInArthexError) as by_attribute:
        getattr(module, name)
    check_refusal(by_attribute.value, f"{path}.{name}")
    with pytest.raises(NotInArthexError) as by_import:  # not a bare "cannot import name"
        exec(f"from {arthex_path(path)} import {name}", {})
    assert str(by_import.value) == str(by_attribute.value)


def test_an_unknown_name_is_a_plain_attribute_error() -> None:
    with pytest.raises(AttributeError, match=r"'arthex\.art\.types' has no attribute 'Nope'"):
        _ = importlib.import_module("arthex.art.types").Nope
    assert not hasattr(art, "not_an_art_name")


# -- what the supported names are ----------------------------------------------------------------

# Written from arthex's public API, not from the table: the paths the issue names.
SAME_OBJECT: dict[str, object] = {
    "art.Model": arthex.Model,
    "art.TrainableModel": arthex.TrainableModel,
    "art.model.TrainableModel": arthex.TrainableModel,
    "art.Trajectory": arthex.Trajectory,
    "art.TrajectoryGroup": arthex.TrajectoryGroup,
    "art.trajectories.Trajectory": arthex.Trajectory,
    "art.trajectories.TrajectoryGroup": arthex.TrajectoryGroup,
    "art.trajectories.LegacyHistory": arthex.History,
    "art.trajectories.trajectory_group": arthex.trajectory_group,
    "art.trajectories.current_trajectory": arthex.current_trajectory,
    "art.trajectories.no_capture": arthex.no_capture,
    "art.types.TrainConfig": arthex.TrainConfig,
    "art.types.TrainSFTConfig": arthex.TrainSFTConfig,
    "art.types.TrainResult": arthex.TrainResult,
    "art.TrainConfig": arthex.TrainConfig,
    "art.gather_trajectory_groups": arthex.gather_trajectory_groups,
    "art.gather.gather_trajectories": arthex.gather_trajectories,
    "art.batches.trajectory_group_batches": arthex.trajectory_group_batches,
    "art.local.LocalBackend": arthex.LocalBackend,
    "art.local.backend.LocalBackend": arthex.LocalBackend,
    "art.ServerlessBackend": arthex.ServerlessBackend,
    "art.serverless.backend.ServerlessBackend": arthex.ServerlessBackend,
    "art.tinker.TinkerBackend": arthex.TinkerBackend,
    "art.pipeline_trainer.PipelineTrainer": arthex.PipelineTrainer,
    "art.pipeline_trainer.trainer.PipelineTrainer": arthex.PipelineTrainer,
    "art.pipeline_trainer.make_group_rollout_fn": arthex.make_group_rollout_fn,
    "art.retry": arthex.retry,
    "art.utils.retry.retry": arthex.utils.retry,
    "art.utils.iterate_dataset": arthex.utils.iterate_dataset,
    "art.utils.iterate_dataset.DatasetBatch": arthex.utils.DatasetBatch,
    "art.utils.limit_concurrency": arthex.utils.limit_concurrency,
    "art.utils.sft.create_lr_schedule": arthex.create_lr_schedule,
    "art.rewards.ruler_score_group": arthex.rewards.ruler_score_group,
    "art.rewards.ruler.TrajectoryScore": arthex.rewards.TrajectoryScore,
    "art.rewards.ruler.DEFAULT_RUBRIC": arthex.rewards.DEFAULT_RUBRIC,
    "art.errors.ARTError": arthex.ArthexError,
    "art.Messages": arthex.Messages,
    "art.types.MessagesAndChoices": arthex.MessagesAndChoices,
    "art.types.Tools": arthex.Tools,
}


@pytest.mark.parametrize("dotted", list(SAME_OBJECT))
def test_the_paths_users_import_are_arthexs_own_objects(dotted: str) -> None:
    path, _, name = dotted.rpartition(".")
    assert getattr(importlib.import_module(arthex_path(path)), name) is SAME_OBJECT[dotted]


def test_supported_names_are_re_exports_not_new_implementations() -> None:
    # ART's settings TypedDicts and their helpers describe arthex's backend settings in ART's
    # vocabulary: they are ART's surface, so they live in arthex.art.dev (see art/dev)
    for path, name in art_names():
        entry = _table.MODULES[path][name]
        if not isinstance(entry, _table.Use) or entry.module.startswith("arthex.art.dev"):
            continue
        value = entry.resolve()
        owner = getattr(value, "__module__", None)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert isinstance(owner, str) and owner.startswith("arthex."), (path, name, owner)
            assert not owner.startswith("arthex.art"), (path, name, owner)


def test_arts_settings_shapes_build_plain_dicts_the_model_warns_about(tmp_path: Path) -> None:
    config = art.dev.InternalModelConfig(
        init_args=art.dev.InitArgs(max_seq_length=2048),
        engine_args=art.dev.EngineArgs(gpu_memory_utilization=0.5),
        trainer_args=art.dev.TrainerArgs(max_grad_norm=1.0),
    )
    assert config == {
        "init_args": {"max_seq_length": 2048},
        "engine_args": {"gpu_memory_utilization": 0.5},
        "trainer_args": {"max_grad_norm": 1.0},
    }
    with pytest.warns(UserWarning, match=r"_internal_config is ignored.*LocalBackend\("):
        art.TrainableModel(name="m", project="p", base_model="any", base_path=str(tmp_path),
                           report_metrics=[], _internal_config=config)  # fmt: skip


def test_an_art_script_renamed_to_arthex_art_trains_a_step(tmp_path: Path) -> None:
    """ART's documented loop with `art` renamed to `arthex.art`, on the in-memory backend."""
    from arthex.art.backend import Backend
    from arthex.art.types import TrainConfig
    from arthex.testing.builders import make_group
    from arthex.testing.fakes.backend import InMemoryBackend

    async def main() -> tuple[int, int, bool]:
        backend = InMemoryBackend()
        model = art.TrainableModel(name="agent", project="renamed", base_model="any",
                                   base_path=str(tmp_path), report_metrics=[])  # fmt: skip
        await model.register(backend)
        groups = [make_group((0.0, 1.0))]
        result = await backend.train(model, groups, learning_rate=1e-5)
        await model.log(groups, metrics=result.metrics, step=result.step, split="train")
        again = await model.train([make_group((1.0, 0.0))], config=TrainConfig())
        await backend.close()
        return result.step, again.step, isinstance(backend, Backend)

    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        assert asyncio.run(main()) == (1, 2, True)
    history = tmp_path / "renamed" / "models" / "agent" / "history.jsonl"
    rows = [json.loads(line) for line in history.read_text().splitlines()]
    assert [row["step"] for row in rows if "loss/learning_rate" in row] == [1, 2]  # one per update


# -- the refusals name something real -------------------------------------------------------------

CALL = re.compile(r"\b(arthex(?:\.\w+)+|model\.\w+|trajectory\.\w+|Trajectory\.\w+)\(([^()]*)\)")
NAMED = re.compile(r"\barthex(?:\.\w+)+")
RECEIVERS: dict[str, object] = {
    "model": arthex.TrainableModel,
    "trajectory": arthex.Trajectory,
    "Trajectory": arthex.Trajectory,
}


def _resolve(dotted: str) -> object:
    parts = dotted.split(".")
    if parts[0] in RECEIVERS:
        value: object = RECEIVERS[parts[0]]
    else:
        value = importlib.import_module(parts[0])
    for part in parts[1:]:
        value = getattr(value, part)
    return value


def alternatives() -> list[str]:
    texts = [*_table.REFUSED_MODULES.values(), *_table.REFUSED_PACKAGES.values()]
    for entries in _table.MODULES.values():
        texts += [entry.instead for entry in entries.values() if isinstance(entry, _table.Refuse)]
    return sorted(set(texts))


@pytest.mark.parametrize("text", alternatives())
def test_each_alternative_names_arthex_objects_and_arguments_that_exist(text: str) -> None:
    for dotted in NAMED.findall(text):
        _resolve(dotted.rstrip("."))
    for dotted, arguments in CALL.findall(text):
        target = _resolve(dotted)
        keywords = re.findall(r"(\w+)=", arguments)
        if not keywords:
            continue
        parameters = inspect.signature(target).parameters  # type: ignore[arg-type]
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
        for keyword in keywords:
            assert takes_any or keyword in parameters, f"{dotted} takes no {keyword}=: {text}"


# -- the package's own shape -----------------------------------------------------------------------


def _file_of(path: str) -> Path:
    relative = Path(*path.split(".")[1:])
    package = PACKAGE / relative / "__init__.py"
    return package if package.is_file() else (PACKAGE / relative).with_suffix(".py")


def _type_checking_names(file: Path) -> set[str]:
    tree = ast.parse(file.read_text())
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            exported: set[str] = set()
            for item in node.body:
                if isinstance(item, ast.Assign):  # `__all__`: what mypy counts as exported
                    exported = set(ast.literal_eval(item.value))
                    continue
                assert isinstance(item, ast.ImportFrom)
                names.update(alias.asname or alias.name for alias in item.names)
            assert exported == names, file
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)  # art.dev's own shapes
        elif isinstance(node, ast.ClassDef | ast.FunctionDef) and not node.name.startswith("_"):
            names.add(node.name)
    return names


def test_each_path_has_its_file_and_each_file_its_path() -> None:
    paths = {*_table.MODULES, *_table.REFUSED_MODULES, *_table.REFUSED_PACKAGES}
    files = {_file_of(path) for path in paths}
    assert all(file.is_file() for file in files), sorted(str(f) for f in files if not f.is_file())
    on_disk = {f for f in PACKAGE.rglob("*.py") if f.name != "_table.py"}
    assert on_disk == files, sorted(str(f.relative_to(PACKAGE)) for f in on_disk ^ files)


@pytest.mark.parametrize("path", list(_table.MODULES))
def test_type_checkers_see_the_same_names_as_the_runtime(path: str) -> None:
    assert _type_checking_names(_file_of(path)) == set(_table.supported(path))


def test_dir_and_all_list_only_what_resolves() -> None:
    for path in _table.MODULES:
        module = importlib.import_module(arthex_path(path))
        assert module.__all__ == _table.supported(path)
        for name in dir(module):
            getattr(module, name)  # a refused name is never offered
    namespace: dict[str, Any] = {}
    exec("from arthex.art.types import *", namespace)
    assert namespace["TrainConfig"] is arthex.TrainConfig
    assert "MegatronRuntimeConfig" not in namespace


def test_importing_every_path_pulls_in_no_heavy_library() -> None:
    code = (
        "import importlib, sys\n"
        f"for path in {importable()!r}:\n"
        "    importlib.import_module('arthex.' + path)\n"
        "import arthex.art as art\n"
        "art.TrainConfig, art.Trajectory, art.dev.InternalModelConfig\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'wandb', 'vllm', 'tinker', 'peft')"
        " if m in sys.modules)\n"
        "print(','.join(heavy))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == ""


def test_the_migration_guide_lists_every_path_and_name() -> None:
    guide = (ROOT / _table.GUIDE).read_text()
    section = guide.split("## ART's import paths: `arthex.art`", 1)[1].split("\n## ", 1)[0]
    rows = {line.split("|")[1].strip() for line in section.splitlines() if line.startswith("| `")}
    listed = {row.split("`")[1] for row in rows}
    expected = {*_table.MODULES, *_table.REFUSED_MODULES, *_table.REFUSED_PACKAGES}
    expected |= {f"{path}.{name}" for path, entries in _table.MODULES.items() for name in entries}
    assert expected <= listed, sorted(expected - listed)
    for path, _name in art_names():
        assert path in listed
    for path in ART_MODULES:
        assert any(path == p or path.startswith(p + ".") for p in listed), path


# -- how much of ART's surface is refused: a number that can only fall ---------------------------

REFUSED_NAMES_AT_MOST = 1334  # lower it as ART names become real; never raise it


def refused_names(modules: dict[str, list[str]]) -> dict[str, list[str]]:
    """ART's public names per module that `arthex.art` refuses: every name of a refused module,
    and each name whose attribute raises NotInArthexError (resolving every one that does not)."""
    refused: dict[str, list[str]] = {}
    for path, names in modules.items():
        if _table.refused_module(path) is not None:
            refused[path] = list(names) or ["(the module)"]
            continue
        module = importlib.import_module(arthex_path(path))
        for name in names:
            try:
                getattr(module, name)
            except NotInArthexError:
                refused.setdefault(path, []).append(name)
    return refused


def test_the_count_of_refused_art_names_only_falls() -> None:
    refused = refused_names(ART_MODULES)
    count = sum(len(names) for names in refused.values())
    total = sum(len(names) or 1 for names in ART_MODULES.values())
    print(f"arthex.art refuses {count} of ART 0.5.23's {total} public names "
          f"(in {len(refused)} of {len(ART_MODULES)} modules)")  # fmt: skip
    assert count <= REFUSED_NAMES_AT_MOST, (
        f"{count} refused names, more than the recorded {REFUSED_NAMES_AT_MOST}"
    )
