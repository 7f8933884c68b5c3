"""ART 0.5.23's `utils.logging` and `utils.lifecycle` and arthex's under `arthex.art` give the
same outcomes on the same cases (art/lifecycle_script.py, one script for both): the printed
lines, the shutdown budgets, `complete_task` through a cancellation, a failed cleanup's
group, process groups ended by SIGTERM and by SIGKILL, a supervised child's exit and a
service closed by a signal."""

from __future__ import annotations

from .art_env import both_outcomes

MESSAGES = [
    ["info", "loading"], ["step", 3], ["ok", "done"], ["warn", "slow: 2.5 s"],
    ["err", "failed"], ["dim", "detail"], ["info", ""], ["step", "two\nlines"],
]  # fmt: skip
LEVELS = [0, 1, 2, 3, 5, 8, 9, 10, 11, 40]


def test_the_lifecycle_helpers_give_arts_outcomes() -> None:
    cases = {"messages": MESSAGES, "levels": LEVELS, "exit_code": 3}
    art, ours = both_outcomes("lifecycle_script", cases)
    assert ours == art
    assert art["printed"].startswith("[HH:MM:SS] \x1b[34mINFO\x1b[0m  loading\n")
    assert art["ended"] == [-15, -9] and art["completed"][0] == [42, "CancelledError"]
