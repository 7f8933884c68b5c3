"""The judge over real HTTP: an OpenAI-compatible server on loopback answers with scripted
replies, and `ruler_score_group` talks to it through the openai client."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import arthex
from arthex.core.metrics import summarize
from arthex.core.trajectories import History, Trajectory, TrajectoryGroup
from arthex.rewards import JudgeCache, JudgeError, JudgeUsage, Price, ruler_score_group
from arthex.testing.builders import make_choice
from tests.e2e._chat_server import PROMPT_TOKENS, Script, ScriptedChatServer

pytestmark = pytest.mark.e2e

JudgeServer = ScriptedChatServer


@pytest.fixture
def judge() -> Iterator[Callable[[Script], JudgeServer]]:
    servers: list[JudgeServer] = []

    def start(script: Script) -> JudgeServer:
        server = JudgeServer(script)
        server.thread.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.httpd.shutdown()
        server.httpd.server_close()


def scores(*values: float) -> str:
    return json.dumps(
        {
            "scores": [
                {"trajectory_id": str(i), "explanation": f"e{i}", "score": v}
                for i, v in enumerate(values, start=1)
            ]
        }
    )


def blocks(request: dict[str, Any]) -> dict[str, str]:
    """The trajectory blocks the judge was shown, by id."""
    text = request["messages"][1]["content"]
    return dict(re.findall(r'<trajectory id="(\d+)">\n(.*?)\n</trajectory>', text, re.DOTALL))


def group_of(*answers: str, rewards: tuple[float, ...] = ()) -> TrajectoryGroup:
    return TrajectoryGroup(
        [
            Trajectory(
                messages_and_choices=[
                    {"role": "user", "content": "capital of France?"},
                    make_choice(answer),
                ],
                reward=rewards[i] if rewards else 0.0,
            )
            for i, answer in enumerate(answers)
        ],
        metadata={"scenario": "france"},
        exceptions=[ValueError("one rollout failed")],
    )


def score(group: TrajectoryGroup, server: JudgeServer, **options: Any) -> TrajectoryGroup | None:
    options.setdefault("cache", None)
    return asyncio.run(ruler_score_group(group, "judge-model", client=server.client(), **options))


def test_scores_replace_rewards_and_the_group_keeps_everything_else(
    judge: Callable[[Script], JudgeServer],
) -> None:
    server = judge(lambda _: scores(0.9, 0.2))
    group = group_of("Paris", "Lyon", rewards=(0.5, 0.5))
    scored = score(group, server)
    assert scored is not None
    assert [t.reward for t in scored.trajectories] == [0.9, 0.2]
    assert [t.metrics["independent_reward"] for t in scored.trajectories] == [0.5, 0.5]
    assert scored.trajectories[0].logs == ["RULER explanation: e1"]
    assert scored.metadata == {"scenario": "france"} and len(scored.exceptions) == 1
    assert [t.reward for t in group.trajectories] == [0.5, 0.5]  # the input is untouched
    (request,) = server.requests
    assert request["model"] == "judge-model"
    assert request["response_format"]["type"] == "json_schema"
    assert "Paris" in blocks(request)["1"] and "Lyon" in blocks(request)["2"]


def test_a_wrong_count_gets_one_corrective_retry(judge: Callable[[Script], JudgeServer]) -> None:
    replies = iter([scores(1.0), scores(0.3, 0.7)])
    server = judge(lambda _: next(replies))
    scored = score(group_of("Paris", "Lyon"), server)
    assert scored is not None and [t.reward for t in scored.trajectories] == [0.3, 0.7]
    _, second = server.requests
    assert len(second["messages"]) == 4 and second["messages"][2]["content"] == scores(1.0)
    assert "1 scores for 2" in second["messages"][3]["content"]
    # Both calls are paid for: 2 + 4 messages sent, two replies received.
    assert scored.metrics["costs/judge/calls"] == 2.0
    assert scored.metrics["costs/judge/prompt_tokens"] == PROMPT_TOKENS * 6
    assert scored.metrics["costs/judge/completion_tokens"] == len(scores(1.0)) + len(
        scores(0.3, 0.7)
    )


def test_malformed_json_twice_is_a_typed_error_or_a_counted_swallowed_failure(
    judge: Callable[[Script], JudgeServer],
) -> None:
    server = judge(lambda _: '{"scores": [ {"trajectory_id": "1", "score": 0.5 }')
    with pytest.raises(JudgeError, match="not valid JSON"):
        score(group_of("Paris", "Lyon"), server)
    assert len(server.requests) == 2
    usage = JudgeUsage()
    assert score(group_of("Paris", "Lyon"), server, swallow_exceptions=True, usage=usage) is None
    assert (usage.failures, usage.calls) == (1, 2)
    assert usage.metrics()["judge/failures"] == 1.0
    assert usage.prompt_tokens == PROMPT_TOKENS * (2 + 4)


def test_a_group_of_identical_trajectories_is_scored_without_a_call(
    judge: Callable[[Script], JudgeServer],
) -> None:
    server = judge(lambda _: pytest.fail("the judge must not be called"))
    scored = score(group_of("Paris", "Paris", "Paris", rewards=(1.0, 0.0, 0.5)), server)
    assert scored is not None and server.requests == []
    assert [t.reward for t in scored.trajectories] == [0.5, 0.5, 0.5]
    assert scored.metrics["judge/identical_group"] == 1.0
    assert scored.metrics["costs/judge/calls"] == 0.0


def test_re_scoring_hits_the_cache_in_memory_and_on_disk(
    judge: Callable[[Script], JudgeServer], tmp_path: Path
) -> None:
    server = judge(lambda _: scores(0.8, 0.1))
    cache = JudgeCache(tmp_path / "verdicts")
    first = score(group_of("Paris", "Lyon"), server, cache=cache)
    again = score(group_of("Paris", "Lyon"), server, cache=cache)
    elsewhere = score(group_of("Paris", "Lyon"), server, cache=JudgeCache(tmp_path / "verdicts"))
    other_rubric = score(group_of("Paris", "Lyon"), server, cache=cache, rubric="be strict")
    assert len(server.requests) == 2  # the first scoring and the new rubric
    for scored in (first, again, elsewhere, other_rubric):
        assert scored is not None and [t.reward for t in scored.trajectories] == [0.8, 0.1]
    assert first is not None and again is not None
    assert first.metrics["judge/cache_hit"] == 0.0 and again.metrics["judge/cache_hit"] == 1.0
    assert again.metrics["costs/judge/prompt_tokens"] == 0.0


def test_costs_are_priced_and_summed_into_the_history_row(
    judge: Callable[[Script], JudgeServer],
) -> None:
    reply = scores(0.6, 0.4)
    server = judge(lambda _: reply)
    prices = {"judge-model": Price(input_per_million=2.0, output_per_million=8.0)}
    groups = [
        score(group_of("Paris", answer), server, prices=prices) for answer in ("Lyon", "Nice")
    ]
    assert all(g is not None for g in groups)
    usd = (PROMPT_TOKENS * 2 * 2.0 + len(reply) * 8.0) / 1e6
    assert groups[0] is not None and groups[0].metrics["costs/judge/usd"] == pytest.approx(usd)
    row = summarize([g for g in groups if g is not None], "train")
    assert row["costs/judge/usd"] == pytest.approx(2 * usd)
    assert row["costs/judge/prompt_tokens"] == 2 * 2 * PROMPT_TOKENS


def test_permutations_shuffle_the_order_and_report_rank_agreement(
    judge: Callable[[Script], JudgeServer],
) -> None:
    def by_content(request: dict[str, Any]) -> str:
        shown = blocks(request)
        return scores(*(0.9 if "Paris" in shown[str(i)] else 0.1 for i in range(1, 4)))

    server = judge(by_content)
    scored = score(group_of("Lyon", "Paris", "Nice"), server, permutations=3)
    assert scored is not None and len(server.requests) == 3
    orders = {tuple(sorted(blocks(r), key=lambda i: blocks(r)[i])) for r in server.requests}
    assert len(orders) > 1  # the trajectories were shown in different orders
    assert [t.reward for t in scored.trajectories] == pytest.approx([0.1, 0.9, 0.1])
    assert scored.metrics["judge/rank_agreement"] == 1.0

    def contrary(request: dict[str, Any]) -> str:  # Paris best the first time, worst after
        shown = blocks(request)
        best = 0.9 if len(fickle.requests) == 1 else 0.1
        return scores(*(best if "Paris" in shown[str(i)] else 0.5 for i in range(1, 4)))

    fickle = judge(contrary)
    wavering = score(group_of("Lyon", "Paris", "Nice"), fickle, permutations=2)
    assert wavering is not None and wavering.metrics["judge/rank_agreement"] == -1.0
    assert [t.reward for t in wavering.trajectories] == pytest.approx([0.5, 0.5, 0.5])


def test_additional_histories_are_shown_to_the_judge(
    judge: Callable[[Script], JudgeServer],
) -> None:
    server = judge(lambda _: scores(0.5, 0.5))
    group = group_of("Paris", "Lyon")
    group.trajectories[1].additional_histories.append(
        History(messages_and_choices=[{"role": "user", "content": "sub-agent searched maps"}])
    )
    score(group, server)
    (request,) = server.requests
    assert '<history id="2.2">' in blocks(request)["2"] and "searched maps" in blocks(request)["2"]


def test_an_unknown_provider_prefix_without_a_client_is_refused() -> None:
    with pytest.raises(Exception, match="pass client="):
        asyncio.run(ruler_score_group(group_of("a", "b"), "anthropic/claude", cache=None))


def eight_answers() -> TrajectoryGroup:
    cities = ("Paris", "Lyon", "Nice", "Lille", "Nantes", "Brest", "Metz", "Dijon")
    return TrajectoryGroup(
        [
            Trajectory(
                messages_and_choices=[
                    {"role": "user", "content": "capital of France?"},
                    make_choice(city),
                ],
                reward=0.0,
            )
            for city in cities
        ],
        metadata={"scenario_id": "france-8"},
    )


def test_a_judge_giving_7_scores_for_8_is_retried_then_named_with_its_reply(
    judge: Callable[[Script], JudgeServer],
) -> None:
    seven = scores(*[0.5] * 7)
    server = judge(lambda _: seven)
    with pytest.raises(JudgeError) as failed:
        score(eight_answers(), server)
    assert len(server.requests) == 2  # the first answer and one corrective retry
    assert len(seven) > 300 and "\n" not in seven  # quoted as the first 297 characters and "..."
    assert str(failed.value) == (
        "judging the group of 8 trajectories (scenario_id='france-8', first user message "
        "'capital of France?') failed: the judge 'judge-model' gave no usable scores for 8 "
        "trajectories after 2 attempts: the reply holds 7 scores for 8 trajectories; its last "
        f"reply: {seven[:297] + '...'!r}"
    )
    assert "\n" not in str(failed.value)


def test_an_empty_reply_is_named_too_and_a_swallowed_failure_logs_the_same_line(
    judge: Callable[[Script], JudgeServer], caplog: pytest.LogCaptureFixture
) -> None:
    server = judge(lambda _: "")
    with caplog.at_level("WARNING", logger="arthex.rewards"):
        assert score(eight_answers(), server, swallow_exceptions=True) is None
    (line,) = [r.getMessage() for r in caplog.records]
    assert line == (
        "judging a group failed and was skipped: JudgeError: judging the group of 8 "
        "trajectories (scenario_id='france-8', first user message 'capital of France?') failed: "
        "the judge 'judge-model' gave no usable scores for 8 trajectories after 2 attempts: the "
        "reply is empty; its last reply: ''"
    )


def test_the_corrective_retries_reach_the_history_row(
    judge: Callable[[Script], JudgeServer], tmp_path: Path
) -> None:
    """A group judged after one retry and one judged at once, logged together: the row counts
    one retry under `diagnostics/judge_retries`; a healthy batch counts none."""
    replies = iter([scores(*[0.5] * 7), scores(*[i / 8 for i in range(8)])])
    retried = score(eight_answers(), judge(lambda _: next(replies)))
    direct = score(group_of("Paris", "Lyon"), judge(lambda _: scores(0.9, 0.1)))
    assert retried is not None and direct is not None
    model = arthex.Model(name="judged", project="ruler", base_path=str(tmp_path), report_metrics=[])
    both = asyncio.run(model.log([retried, direct], split="train"))
    healthy = asyncio.run(model.log([direct], split="train", step=1))
    assert both is not None and both.values["diagnostics/judge_retries"] == 1.0
    assert healthy is not None and healthy.values["diagnostics/judge_retries"] == 0.0
    lines = (tmp_path / "ruler" / "models" / "judged" / "history.jsonl").read_text().splitlines()
    assert [json.loads(line)["diagnostics/judge_retries"] for line in lines] == [1.0, 0.0]
