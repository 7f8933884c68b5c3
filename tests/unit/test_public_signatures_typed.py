"""The public entry points have real, named, typed parameters, as `mypy --strict` downstream
sees them: a script calling each with a wrong type (or a misspelt keyword) is reported, and
an ART-style script using them right type-checks clean.

Each snippet below is written to its own module and all of them are checked by one mypy run
(mypy's API, the project's own settings and cache, so only the snippets are checked when
`mypy --strict` ran before, as in `make test`). Each wrong call must be reported on its own
line with the expected error code and nothing else reported in its module; the script using
everything right reports nothing.
"""

from __future__ import annotations

import re
import textwrap
from collections import defaultdict
from pathlib import Path

import pytest

mypy_api = pytest.importorskip("mypy.api")

ROOT = Path(__file__).resolve().parents[2]

PRELUDE = """\
from __future__ import annotations

from pathlib import Path

import arthex as art
from arthex.apps.server.keys import KeyRing
from arthex.apps.server.main import serve


async def rollout(model: art.TrainableModel, scenario: str, config: None) -> art.Trajectory:
    return art.Trajectory(messages_and_choices=[], reward=0.0)


async def group_rollout(
    model: art.TrainableModel, scenario: str, config: None
) -> art.TrajectoryGroup:
    return art.TrajectoryGroup([await rollout(model, scenario, config)])


async def check(
    model: art.TrainableModel,
    backend: art.LocalBackend,
    serverless: art.ServerlessBackend,
    tinker: art.TinkerBackend,
    groups: list[art.TrajectoryGroup],
    keys: KeyRing,
) -> None:
"""

# An ART script's calls, typed as a user writes them: nothing may be reported.
RIGHT = """\
result = await backend.train(
    model, groups, learning_rate=1e-5, loss_fn="ppo", kl_penalty_coef=0.1, verbose=True
)
step: int = result.step
await serverless.train(model, groups, learning_rate=5e-6, normalize_advantages=False)
await tinker.train(model, groups, epsilon=0.2, epsilon_high=0.28, save_checkpoint=True)
await model.train(groups, config={"learning_rate": 1e-5})
await model.train(groups, config=art.TrainConfig(learning_rate=1e-5), progress=False)
await model.train_sft([[{"role": "user", "content": "x"}]], config={"batch_size": 2})
trainer = art.PipelineTrainer(
    model,
    backend,
    art.make_group_rollout_fn(rollout, n=4),
    ["a", "b"],
    None,
    max_steps_off_policy=2,
    num_rollout_workers=4,
    resume=True,
    log_interval_seconds=30.0,
)
await trainer.train()
art.PipelineTrainer(model, backend, group_rollout, ["a"], None, max_steps=3)
art.TrainConfig.model_validate({"learning_rate": 1e-5})
art.TrainSFTConfig.model_validate({"learning_rate": [1e-5, 2e-5]})
serve(backend, keys=keys, state_dir=Path("state"), port=0)
print(step)
"""

# One wrong call per entry point (and per kind of mistake).
WRONG = {
    "backend_train_value": 'await backend.train(model, groups, learning_rate="fast")',
    "backend_train_misspelt": "await backend.train(model, groups, learning_rat=1e-5)",
    "backend_train_loss": 'await backend.train(model, groups, loss_fn="dro")',
    "backend_train_groups": 'await backend.train(model, "groups")',
    "backend_train_port_config": 'backend.train_steps(model.run, groups, {"learning_rate": 1e-5})',
    "serverless_train": "await serverless.train(model, groups, scale_rewards=None)",
    "tinker_train": 'await tinker.train(model, groups, epsilon="0.2")',
    "model_train_config": "await model.train(groups, config=3)",
    "model_train_groups": "await model.train(3)",
    "model_train_sft_config": "await model.train_sft([], config=art.TrainConfig())",
    "model_register": 'await model.register("local")',
    "model_log_split": "await model.log(groups, split=3)",
    "model_delete_checkpoints": 'await model.delete_checkpoints(keep_last="1")',
    "trainable_model": 'art.TrainableModel(name="a", project="p", base_model=3)',
    "model": 'art.Model(name="a", project=3)',
    "local_backend": 'art.LocalBackend(lora_rank="8")',
    "pipeline_bound": (
        'art.PipelineTrainer(model, backend, group_rollout, ["a"], None, max_steps_off_policy="4")'
    ),
    "pipeline_interval": (
        'art.PipelineTrainer(model, backend, group_rollout, ["a"], None, log_interval_seconds="9")'
    ),
    "pipeline_workers": (
        'art.PipelineTrainer(model, backend, group_rollout, ["a"], None, num_rollout_workers=2.5)'
    ),
    "pipeline_resume": (
        'art.PipelineTrainer(model, backend, group_rollout, ["a"], None, resume="yes")'
    ),
    "pipeline_unknown": (
        'art.PipelineTrainer(model, backend, group_rollout, ["a"], None, num_workers=4)'
    ),
    "pipeline_rollout": "art.PipelineTrainer(model, backend, rollout, [1], None)",
    "make_group_rollout_fn": 'art.make_group_rollout_fn(rollout, n="4")',
    "train_config": 'art.TrainConfig(learning_rate="fast")',
    "train_config_validate": "art.TrainConfig.model_validate(3)",
    "train_sft_config": 'art.TrainSFTConfig(batch_size="big")',
    "gather": "await art.gather_trajectory_groups(3)",
    "serve": 'serve(backend, keys=keys, state_dir="state", port="8000")',
}

EXPECTED = {
    "backend_train_value": "arg-type",
    "backend_train_misspelt": "call-arg",
    "backend_train_loss": "arg-type",
    "backend_train_groups": "arg-type",
    "backend_train_port_config": "arg-type",
    "serverless_train": "arg-type",
    "tinker_train": "arg-type",
    "model_train_config": "arg-type",
    "model_train_groups": "arg-type",
    "model_train_sft_config": "arg-type",
    "model_register": "arg-type",
    "model_log_split": "arg-type",
    "model_delete_checkpoints": "arg-type",
    "trainable_model": "arg-type",
    "model": "arg-type",
    "local_backend": "arg-type",
    "pipeline_bound": "arg-type",
    "pipeline_interval": "arg-type",
    "pipeline_workers": "arg-type",
    "pipeline_resume": "arg-type",
    "pipeline_unknown": "call-arg",
    "pipeline_rollout": "arg-type",
    "make_group_rollout_fn": "arg-type",
    "train_config": "arg-type",
    "train_config_validate": "arg-type",
    "train_sft_config": "arg-type",
    "gather": "arg-type",
    "serve": "arg-type",
}

_ERROR = re.compile(r"^(?P<file>[^:]+\.py):(?P<line>\d+): error: .*\[(?P<code>[a-z-]+)\]$")


def snippet(body: str) -> str:
    return PRELUDE + textwrap.indent(body, "    ")


@pytest.fixture(scope="module")
def reported(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> dict[str, set[tuple[int, str]]]:
    """(line, code) of every error mypy reports, per snippet module, from one mypy run."""
    folder = tmp_path_factory.mktemp("typed_snippets")
    files = {"right": snippet(RIGHT)}
    files.update({name: snippet(call) for name, call in WRONG.items()})
    for name, text in files.items():
        (folder / f"snippet_{name}.py").write_text(text)
    # the project's own cache, filled by `mypy --strict` (which `make test` runs first) with
    # the same settings, so only the snippets are checked; else one kept by pytest
    cache = ROOT / ".mypy_cache"
    if not cache.is_dir():  # pytest's cache, or this session's folder under -p no:cacheprovider
        kept = getattr(request.config, "cache", None)
        cache = (
            kept.mkdir("mypy-public-signatures")
            if kept is not None
            else tmp_path_factory.mktemp("mypy-cache")
        )
    stdout, stderr, status = mypy_api.run(
        [
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(cache),
            "--no-error-summary",
            "--hide-error-context",
            *sorted(str(path) for path in folder.glob("snippet_*.py")),
        ]
    )
    assert status in (0, 1), stdout + stderr  # 2: mypy itself failed
    found: dict[str, set[tuple[int, str]]] = defaultdict(set)
    for line in stdout.splitlines():
        match = _ERROR.match(line)
        if match:
            name = Path(match["file"]).stem.removeprefix("snippet_")
            found[name].add((int(match["line"]), match["code"]))
    return found


def test_an_art_style_script_using_every_entry_point_right_type_checks_clean(
    reported: dict[str, set[tuple[int, str]]],
) -> None:
    assert reported.get("right", set()) == set()


@pytest.mark.parametrize("name", sorted(WRONG))
def test_a_wrong_type_at_an_entry_point_is_reported_by_mypy(
    reported: dict[str, set[tuple[int, str]]], name: str
) -> None:
    line = snippet(WRONG[name]).splitlines().index("    " + WRONG[name]) + 1
    assert reported.get(name, set()) == {(line, EXPECTED[name])}


def test_help_shows_named_parameters_not_args_and_kwargs() -> None:
    """What `help()` and an IDE's hover read (`inspect.signature`)."""
    import inspect

    import arthex as art
    from arthex.apps.server.main import serve

    variadic = {inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD}
    for entry in (
        art.LocalBackend.train,
        art.ServerlessBackend.train,
        art.TinkerBackend.train,
        art.PipelineTrainer.__init__,
        art.TrainableModel.train,
        art.TrainableModel.train_sft,
        serve,
    ):
        parameters = inspect.signature(entry).parameters.values()
        assert not [p.name for p in parameters if p.kind in variadic], entry.__qualname__
    pipeline = inspect.signature(art.PipelineTrainer.__init__).parameters
    assert {
        name: pipeline[name].default
        for name in (
            "max_steps_off_policy",
            "num_rollout_workers",
            "resume",
            "log_interval_seconds",
        )
    } == {  # ART's defaults
        "max_steps_off_policy": 4,
        "num_rollout_workers": 16,
        "resume": True,
        "log_interval_seconds": 60.0,
    }
    train = inspect.signature(art.LocalBackend.train).parameters
    assert train["learning_rate"].default == 5e-6 and "trajectory_groups" in train
