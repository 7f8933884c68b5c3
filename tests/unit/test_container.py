"""The composition root: defaults, overrides, and the choice of mirrors."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from dependency_injector import providers

import arthex
from arthex.composition.container import backend, container, mirrors, wandb_wanted
from arthex.core.errors import InvalidInputError
from arthex.testing.fakes.backend import InMemoryBackend
from arthex.testing.fakes.history import InMemoryHistory


def test_public_model_gets_file_adapters_under_base_path(tmp_path: Path) -> None:
    model = arthex.Model(name="m", project="p", base_path=str(tmp_path), report_metrics=[])
    asyncio.run(model.log(metrics={"score": 1.0}, split="val"))
    assert (tmp_path / "p" / "models" / "m" / "history.jsonl").exists()


def test_overridden_providers_are_used_and_explicit_ports_win(tmp_path: Path) -> None:
    shared = InMemoryHistory()
    with container.history.override(providers.Object(shared)):
        model = arthex.Model(name="m", project="p", base_path=str(tmp_path), report_metrics=[])
        asyncio.run(model.log(metrics={"score": 2.0}))
    assert [row.values for row in asyncio.run(shared.rows(model.run))] == [{"val/score": 2.0}]
    assert not (tmp_path / "p").exists()

    explicit = InMemoryHistory()
    model = arthex.Model(
        name="m", project="p", base_path=str(tmp_path), report_metrics=[], reporter=explicit
    )
    asyncio.run(model.log(metrics={"score": 3.0}))
    assert len(asyncio.run(explicit.rows(model.run))) == 1


def test_wandb_is_chosen_by_name_or_by_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for var in ("WANDB_MODE", "WANDB_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    assert not wandb_wanted(None)
    assert not wandb_wanted([])
    assert wandb_wanted(["wandb"])
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert wandb_wanted(None)
    assert not wandb_wanted([])
    monkeypatch.delenv("WANDB_MODE")
    (tmp_path / "netrc").write_text("machine api.wandb.ai login user password key\n")
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    assert wandb_wanted(None)


def test_unknown_reporters_and_backends_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="tensorboard"):
        mirrors(str(tmp_path), ["tensorboard"])
    with pytest.raises(InvalidInputError, match="nope"):
        backend("nope")
    assert isinstance(backend("inmemory"), InMemoryBackend)


def test_a_uri_base_path_is_refused_for_the_local_history() -> None:
    with pytest.raises(InvalidInputError, match=r"history\.jsonl needs a local file system"):
        arthex.Model(name="m", project="p", base_path="s3://bucket/runs", report_metrics=[])


def test_the_backends_come_from_one_table_the_entry_points() -> None:
    """The names a user may pass are exactly pyproject.toml's `arthex.backends` table (read
    as a file here, not through the code under test)."""
    import tomllib

    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    table = pyproject["project"]["entry-points"]["arthex.backends"]
    assert set(table) >= {"local", "serverless", "tinker", "inmemory"}
    with pytest.raises(InvalidInputError) as refused:
        backend("nope")
    listed = str(refused.value).split("known: ")[1].split(", or")[0].split(", ")
    assert set(listed) == set(table)


def test_a_factory_of_ones_own_is_named_module_colon_callable() -> None:
    made = backend("arthex.testing.fakes.backend:InMemoryBackend")
    assert isinstance(made, InMemoryBackend)
    with pytest.raises(InvalidInputError, match=r"cannot load backend 'arthex\.nowhere:Thing'"):
        backend("arthex.nowhere:Thing")
    with pytest.raises(InvalidInputError, match=r"cannot load backend 'arthex\.testing:Nothing'"):
        backend("arthex.testing:Nothing")
