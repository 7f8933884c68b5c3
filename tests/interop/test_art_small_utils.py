"""ART 0.5.23's small utilities and arthex's under `arthex.art` give the same outcomes on the
same cases (art/small_utils_script.py, one script for both): `utils.format_message`,
`utils.grpo.rewards_have_zero_variance`, the path helpers of `utils.output_dirs` (given an
`art_path`: without one the two differ on purpose, docs/migrating-from-art.md) and
`utils.get_model_step.get_step_from_dir` on run folders whose checkpoints are whole; and
`local.checkpoints` (art/local_checkpoints_script.py) on copies of such run folders."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .art_env import both_outcomes

MESSAGES: list[dict[str, Any]] = [
    {"role": "user", "content": "What is 2 + 2?"},
    {"role": "assistant", "content": "4"},
    {"role": "system", "content": ""},
    {"role": "assistant", "content": None, "refusal": "I can't help with that."},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2}'}},
        {"id": "c2", "type": "function", "function": {"name": "neg", "arguments": "{}"}},
    ]},
    {"role": "assistant", "content": "Let me add.", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{}"}},
    ]},
    {"role": "assistant", "content": "x", "tool_calls": ["not a dict", {"function": "nope"}]},
    {"role": "tool", "content": "4", "tool_call_id": "c1"},
    {"role": "user", "content": [{"type": "text", "text": "parts"}]},
    {"role": "developer"},
]  # fmt: skip

REWARDS = [[], [0.3], [1.0, 1.0], [1.0, 1.0 + 1e-13], [1.0, 1.0 + 1e-11], [0.0, 1.0, 0.0]]
PATHS = [["proj", "run-1", "/data/.art", 7, "train"], ["p", "r", "rel/base", 12345, "val"]]


def run_folders(root: Path) -> list[str]:
    empty = root / "empty"
    empty.mkdir()
    trained = root / "trained"
    for step in ("0002", "0010"):
        (trained / "checkpoints" / step).mkdir(parents=True)
        for name in ("adapter_model.safetensors", "adapter_config.json"):
            (trained / "checkpoints" / step / name).write_bytes(b"{}")
    (trained / "checkpoints" / "notes").mkdir()
    return [str(empty), str(trained)]


def test_the_small_utilities_give_arts_outcomes(tmp_path: Path) -> None:
    cases = {"messages": MESSAGES, "rewards": REWARDS, "paths": PATHS,
             "run_folders": run_folders(tmp_path)}  # fmt: skip
    art, ours = both_outcomes("small_utils_script", cases)
    assert ours == art
    assert art["format"][0] == "User:\nWhat is 2 + 2?\n" and art["steps"] == [0, 10]


def checkpoint(folder: Path, adapter: bool = False) -> None:
    folder.mkdir(parents=True)
    names = ("adapter_model.safetensors", "adapter_config.json") if adapter else (
        "model.safetensors", "trainer_state.json")  # fmt: skip
    for name in names:
        (folder / name).write_bytes(b"{}")


def test_the_local_checkpoint_helpers_give_arts_outcomes(tmp_path: Path) -> None:
    """`art.local.checkpoints` on run folders whose checkpoints are whole (a half-written one
    is a step for ART, not for arthex: docs/migrating-from-art.md)."""
    trained = tmp_path / "trained"
    for step, adapter in (("0001", True), ("0002", False), ("0010", True), ("0011", False)):
        checkpoint(trained / "checkpoints" / step, adapter)
    (trained / "checkpoints" / "notes.txt").write_text("not a step")
    (trained / "history.jsonl").write_text("{}\n")
    empty = tmp_path / "empty"
    empty.mkdir()
    old = tmp_path / "old"
    for step in ("0001", "0003", "12"):
        checkpoint(old / step, adapter=True)
    checkpoint(old / "checkpoints" / "0003")  # in both layouts: ART and arthex leave it
    (old / "model.json").write_text("{}")
    cases = {
        "last": [str(trained), str(empty), str(old)],
        "delete": [[str(trained), [2, 10]], [str(trained), []], [str(old), [3]]],
        "migrate": [str(old), str(trained)],
    }
    art, ours = both_outcomes("local_checkpoints_script", cases)
    assert ours == art
    assert art["last"] == ["checkpoints/0011", None, "checkpoints/0003"]
    assert art["deleted"][0] == [
        "checkpoints/0002/model.safetensors",
        "checkpoints/0002/trainer_state.json",
        "checkpoints/0010/adapter_config.json",
        "checkpoints/0010/adapter_model.safetensors",
        "checkpoints/notes.txt",
        "history.jsonl",
    ]
    assert "checkpoints/12/adapter_config.json" in art["migrated"][0]  # moved, not renamed
