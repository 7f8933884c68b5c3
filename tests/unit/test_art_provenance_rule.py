"""ART's provenance rule: the list, the latest `lora` artifact asked for and saved (W&B's public
API stood in for at its edge: it needs W&B's server), nothing without one; and the wandb doors'
missing-SDK error. The SDK itself, offline: tests/e2e/test_art_wandb_sdk.py."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from arthex.art.utils import wandb_sdk
from arthex.art.utils.record_provenance import record_provenance_for_artifact
from arthex.core.errors import MissingExtraError
from arthex.utils import wandb_sdk as sdk
from arthex.utils.record_provenance import provenance_after


def test_a_provenance_is_appended_unless_it_is_already_the_last() -> None:
    assert provenance_after(None, "local-rl") == ["local-rl"]
    assert provenance_after(["local-rl"], "serverless-rl") == ["local-rl", "serverless-rl"]
    assert provenance_after(("local-rl", "serverless-rl"), "serverless-rl") == [
        "local-rl",
        "serverless-rl",
    ]
    assert provenance_after(["a", "b"], "a") == ["a", "b", "a"]  # only the last one counts
    assert provenance_after([], "a") == ["a"]


@pytest.mark.parametrize("door", ["api", "artifact", "init", "login", "settings"])
def test_without_the_sdk_each_door_names_the_extra_to_install(
    door: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [m for m in sys.modules if m == "wandb" or m.startswith("wandb.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb...` raises ImportError
    with pytest.raises(MissingExtraError, match=r"^wandb is not installed; .*\[wandb\]") as caught:
        getattr(wandb_sdk, door)()
    assert caught.value.extra == "wandb"
    with pytest.raises(MissingExtraError):
        wandb_sdk.comm_error_type()
    with pytest.raises(MissingExtraError):
        record_provenance_for_artifact(entity="e", project="p", name="n", provenance="local-rl")


class StandInApi:
    """W&B's public API at its edge (no server here): serves one real `wandb.Artifact`, or
    answers as W&B does for an artifact that does not exist (its CommError), and records what
    was asked and saved."""

    def __init__(self, artifact: Any | None) -> None:
        self.stored = artifact
        self.asked: list[tuple[str, str | None]] = []
        self.saved: list[dict[str, Any]] = []

    def artifact(self, name: str, type: str | None = None) -> Any:
        self.asked.append((name, type))
        if self.stored is None:
            raise wandb_sdk.comm_error_type()(f"artifact {name} not found")
        self.stored.save = lambda: self.saved.append(dict(self.stored.metadata))
        return self.stored


def test_the_latest_lora_artifact_gets_the_entry_and_is_saved(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    wandb = pytest.importorskip("wandb")
    stored = wandb.Artifact("agent", type="lora", metadata={"wandb.provenance": ["local-rl"]})
    api = StandInApi(stored)
    monkeypatch.setattr(sdk, "api", lambda: api)
    for provenance in ("serverless-rl", "serverless-rl", "local-rl"):
        record_provenance_for_artifact(
            entity="team", project="bench", name="agent", provenance=provenance
        )
    assert api.asked == [("team/bench/agent:latest", "lora")] * 3
    assert [saved["wandb.provenance"] for saved in api.saved] == [
        ["local-rl", "serverless-rl"],
        ["local-rl", "serverless-rl"],  # already last: saved unchanged, as ART does
        ["local-rl", "serverless-rl", "local-rl"],
    ]


def test_no_artifact_yet_records_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("wandb")
    api = StandInApi(None)
    monkeypatch.setattr(sdk, "api", lambda: api)
    record_provenance_for_artifact(entity="e", project="p", name="n", provenance="local-rl")
    assert api.asked == [("e/p/n:latest", "lora")] and api.saved == []
