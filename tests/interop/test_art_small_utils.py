"""ART 0.5.23's small utilities and arthex's under `arthex.art` give the same outcomes on the
same cases (art/small_utils_script.py, one script for both): `utils.format_message`,
`utils.grpo.rewards_have_zero_variance`, the path helpers of `utils.output_dirs` (given an
`art_path`: without one the two differ on purpose, docs/migrating-from-art.md) and
`utils.get_model_step.get_step_from_dir` on run folders whose checkpoints are whole."""

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
