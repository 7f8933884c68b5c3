"""ART's provenance list rule and the wandb doors' missing-SDK error, without wandb running
(the SDK itself, offline: tests/e2e/test_art_wandb_sdk.py)."""

from __future__ import annotations

import sys

import pytest

from arthex.art.utils import wandb_sdk
from arthex.art.utils.record_provenance import record_provenance_for_artifact
from arthex.core.errors import MissingExtraError
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
