"""The judge's pure parts: what it is shown, how its answer is read, rank agreement, the cache
and where judging costs land in a history row."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from arthex.core.metrics import summarize
from arthex.core.trajectories import History, Trajectory, TrajectoryGroup
from arthex.rewards import JudgeCache, TrajectoryScore, Verdict, rank_agreement
from arthex.rewards.prompt import ReplyError, View, judge_messages, parse_scores
from arthex.rewards.ruler import kendall_tau_b
from arthex.testing.builders import make_choice

SYSTEM = {"role": "system", "content": "Book a table."}
TOOLS = [{"type": "function", "function": {"name": "book"}}]


def trajectory(answer: str, *, sub_agent: str | None = None) -> Trajectory:
    histories = []
    if sub_agent is not None:
        histories = [History(messages_and_choices=[{"role": "user", "content": sub_agent}])]
    return Trajectory(
        messages_and_choices=[SYSTEM, {"role": "user", "content": "for two"}, make_choice(answer)],
        tools=TOOLS,
        additional_histories=histories,
    )


def test_the_judge_sees_shared_context_once_tools_once_and_every_history() -> None:
    views = [View.of(trajectory("booked")), View.of(trajectory("no", sub_agent="searched"))]
    system, user = judge_messages(views, "be fair")
    assert "be fair" in system["content"] and "exactly 2 entries" in system["content"]
    text = user["content"]
    assert text.count("Book a table.") == 1 and text.startswith("<context>")
    assert text.count('"name": "book"') == 1
    assert '<trajectory id="1">' in text and '<trajectory id="2">' in text
    assert '<history id="2.2">' in text and "searched" in text
    first = text.index('<trajectory id="1">')
    assert "booked" in text[first : text.index('<trajectory id="2">')]


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        ("", "empty"),
        ("I like the first one", "no JSON object"),
        ('{"scores": [{"trajectory_id": "1", "score": 0.5}', "not valid JSON"),
        ('{"scores": [}', "not valid JSON"),
        ('{"ranking": []}', 'no "scores" list'),
        ('{"scores": [{"trajectory_id": "1", "score": 1}]}', "1 scores for 2"),
        ('{"scores": [{"trajectory_id": "1", "score": 1}, {"trajectory_id": "1", "score": 0}]}',
         "twice"),
        ('{"scores": [{"trajectory_id": "1", "score": 1}, {"trajectory_id": "3", "score": 0}]}',
         "expected"),
        ('{"scores": [{"trajectory_id": "1", "score": 7}, {"trajectory_id": "2", "score": 0}]}',
         "not between 0 and 1"),
        ('{"scores": [{"trajectory_id": "1", "score": "hi"}, {"trajectory_id": "2", "score": 0}]}',
         "no numeric score"),
    ],
)  # fmt: skip
def test_an_unusable_reply_names_its_problem(reply: str, problem: str) -> None:
    with pytest.raises(ReplyError, match=problem):
        parse_scores(reply, 2)


def test_a_reply_in_a_code_fence_with_prose_and_integer_ids_is_read_in_id_order() -> None:
    reply = (
        "Here you go:\n```json\n"
        '{"scores": [{"trajectory_id": 2, "explanation": "meh", "score": 0.25},'
        ' {"trajectory_id": "1", "explanation": "good", "score": 1}]}\n```'
    )
    first, second = parse_scores(reply, 2)
    assert (first.trajectory_id, first.score, first.explanation) == ("1", 1.0, "good")
    assert (second.trajectory_id, second.score) == ("2", 0.25)


def test_kendall_tau_b_on_worked_examples() -> None:
    # 4 items, one swapped pair: 5 concordant, 1 discordant -> (5 - 1) / 6.
    assert kendall_tau_b([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(4 / 6)
    # A tie in x: 2 concordant, 1 pair tied in x only -> 2 / sqrt((2 + 1) * 2).
    assert kendall_tau_b([1, 2, 2], [1, 2, 3]) == pytest.approx(2 / math.sqrt(6))
    assert kendall_tau_b([0.5, 0.5], [0, 1]) is None
    assert rank_agreement([[0.1, 0.9, 0.5], [0.2, 0.8, 0.6], [0.9, 0.1, 0.5]]) == pytest.approx(
        (1 - 1 - 1) / 3
    )


def test_a_directory_cache_is_shared_across_instances_and_survives_a_bad_file(
    tmp_path: Path,
) -> None:
    verdict = Verdict((TrajectoryScore(trajectory_id="1", explanation="x", score=0.5),), 0.75)
    JudgeCache(tmp_path).put("k", verdict)
    assert JudgeCache(tmp_path).get("k") == verdict
    (tmp_path / "bad.json").write_text("{not json")
    assert JudgeCache(tmp_path).get("bad") is None
    assert JudgeCache().get("k") is None
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_judging_costs_are_summed_over_the_batch_under_their_own_names() -> None:
    rewarded = [Trajectory(reward=r, metrics={"ruler_score": r}) for r in (0.0, 1.0)]
    groups = [
        TrajectoryGroup(rewarded, metrics={"costs/judge/prompt_tokens": 100, "judge/cache_hit": 0}),
        TrajectoryGroup(rewarded, metrics={"costs/judge/prompt_tokens": 50, "judge/cache_hit": 1}),
        TrajectoryGroup(exceptions=[ValueError("x")], metrics={"costs/judge/prompt_tokens": 7}),
    ]
    row = summarize(groups, "train")
    assert row["costs/judge/prompt_tokens"] == 157.0
    assert row["train/group/judge/cache_hit"] == 0.5
    assert not any(key.endswith("group/costs/judge/prompt_tokens") for key in row)
    assert json.dumps(row)  # a valid history row
