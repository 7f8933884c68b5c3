"""ART 0.5.23's pipeline examples (`art.pipeline_trainer.yes_no_maybe_pipeline` and
`...binary_prefix_tool_pipeline`) and arthex's under `arthex.art` give the same answers on the
same cases (art/pipeline_examples_script.py, one script for both): constants, scenarios, the
yes/no/maybe reward, the binary-prefix guess checks and the guess read from tool calls, the
run folder, and the history summary where ART's prints one. Where ART's summary differs on
purpose (docs/migrating-from-art.md), the test says how."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .art_env import both_outcomes

SECRET = "110000110100101011111010101011"

ANSWERS = [
    "maybe", "no", "yes", "Maybe.", "  'NO', I think", '"yes"!', "(maybe)", "[no]", "{yes}",
    "yes\nno", "\u00a0maybe\u2003so", "\x1cmaybe", "maybe\x85", "\u200bmaybe", "MAYBE?!",
    "maybe-not", "nope", "I say yes", "", "   \n\t", "...", "'", "Yes, no", "no.maybe",
    "\u0130yes", "maybe\u3000no", ":maybe:", "«maybe»",
]  # fmt: skip

GUESSES = ["", "0", "1", SECRET, "0120", "11 00", "1\n", "١", "０1", "10" * 40]

PREFIX_PAIRS = [
    [SECRET, SECRET], ["1100", SECRET], ["1101", SECRET], ["", SECRET], [SECRET, ""],
    [SECRET + "1", SECRET], ["0", SECRET], ["abc", "abd"], ["ab", "abc"], ["x", "x"],
]  # fmt: skip

ARGUMENTS = [
    '{"guess": "0101"}', '  {"guess": "0101", "why": "x"}  ', 'Sure! {"guess": "111"} done',
    '{"guess": 101}', '{"guess": true}', '{"guess": 1.5}', '{"guess": [1, 0]}',
    '{"guess": {"bits": "1"}}', '{"guess": null, "x": 1} guess="10"', '{"guess": ""}',
    "guess: '0011'", 'guess = "1"', 'guess:"1"  guess:"0"', "guess='1' guess=\"0\"",
    "0101 1100", "1", "0", " 10\n01 ", '{"answer": "0101"}', "[1, 0]", "abc", "", "   ",
    "{not json}", '{"guess": "1"', 'x} {"guess": "0"}', '{"a": {"guess": "1"}}',
    '"0101"', "null", "{}", '{"Guess": "1"}', "GUESS: \"1\"", "guess\n=\n'01'",
]  # fmt: skip


def tool_call(name: str, arguments: str | None, index: int = 0) -> dict[str, Any]:
    return {"id": f"c{index}", "type": "function",
            "function": {"name": name, "arguments": arguments}}  # fmt: skip


def choice_cases() -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = []
    for form in ("openai", "dicts"):
        cases += [{"form": form, "tool_calls": [tool_call("make_guess", a)]} for a in ARGUMENTS]
        cases += [
            {"form": form, "tool_calls": []},
            {"form": form, "tool_calls": [tool_call("other", '{"guess": "1"}')]},
            {"form": form, "tool_calls": [
                tool_call("other", '{"guess": "1"}', 0), tool_call("make_guess", "{}", 1),
                tool_call("make_guess", '{"guess": "01"}', 2),
                tool_call("make_guess", '{"guess": "10"}', 3)]},
        ]  # fmt: skip
    cases.append({"form": "dicts", "tool_calls": [{"function": None}, {"type": "function"}]})
    return cases


def write_history(run_dir: Path, rows: list[dict[str, Any]]) -> None:
    run_dir.mkdir(parents=True)
    stamp = "2026-01-01T00:00:00+00:00"
    text = "".join(
        json.dumps({**row, "training_step": row["step"], "recorded_at": stamp}) + "\n"
        for row in rows
    )
    (run_dir / "history.jsonl").write_text(text)


def runs(root: Path) -> list[list[Any]]:
    """(base_path, project, run, tail) of three runs, and of one without a history:
    `art-keys` holds training rows only, with the keys ART's summary reads; `mixed` has those
    and evaluation rows; `arthex-keys` is what arthex's pipeline writes (train rows, then the
    update's row with its discards and policy age)."""
    base = str(root / "runs")
    art_keys = [
        {"step": step, "train/reward": step / 4, "train/reward_std_dev": 0.25,
         "train/discarded_stale_groups": float(step // 2), "train/steps_off_policy": 1.0}
        for step in range(1, 8)
    ]  # fmt: skip
    write_history(root / "runs" / "p" / "models" / "art-keys", art_keys)
    mixed = [row for step, train in enumerate(art_keys) for row in
             (train, {"step": step + 2, "val/reward": 0.5})]  # fmt: skip
    write_history(root / "runs" / "p" / "models" / "mixed", mixed)
    arthex_keys = [row for step in range(1, 4) for row in (
        {"step": step, "train/reward": step / 4, "train/reward_std_dev": 0.25},
        {"step": step + 1, "discarded/cum/stale_groups": 0.0,
         "offpolicy/token_weighted_policy_age_steps": 1.0})]  # fmt: skip
    write_history(root / "runs" / "p" / "models" / "arthex-keys", arthex_keys)
    return [
        [base, "p", "art-keys", 5], [base, "p", "art-keys", 2], [base, "p", "art-keys", 0],
        [base, "p", "none", 5], [base, "p", "mixed", 3], [base, "p", "arthex-keys", 5],
    ]  # fmt: skip


def test_the_pipeline_examples_give_arts_answers(tmp_path: Path) -> None:
    summaries = runs(tmp_path)
    cases = {
        "yes_constants": ["BASE_MODEL", "MODEL_NAME", "PROJECT", "ROLLOUTS_PER_SCENARIO",
                          "MAX_TOKENS", "MAX_STEPS", "EVAL_TRAJECTORY_COUNT",
                          "EVAL_EVERY_N_STEPS"],
        "answers": ANSWERS,
        "bits_constants": ["TOOL_NAME", "SECRET_BITS", "SECRET_LEN", "TOOLS", "TOOL_CHOICE",
                           "SYSTEM_PROMPT", "USER_PROMPT"],
        "guesses": GUESSES,
        "prefix_pairs": PREFIX_PAIRS,
        "choices": choice_cases(),
        "runs": [[str(tmp_path / ".art"), "proj", "run-1"], ["rel/base", "p", "r"]],
        "summaries": summaries,
    }  # fmt: skip
    art, ours = both_outcomes("pipeline_examples_script", cases)
    art_summaries, our_summaries = art.pop("summaries"), ours.pop("summaries")
    assert ours == art
    assert len(art["scenarios"]) == 48 and art["rewards"][:3] == [1.0, 0.75, 0.5]
    assert {tuple(x) for x in art["extracted"]} >= {("0101", "tool_call"), (None, "missing")}

    # the summary: the same lines on training rows with ART's keys, and with no history
    assert our_summaries[:4] == art_summaries[:4]
    assert art_summaries[0]["printed"].splitlines()[2] == (
        "  step=3 reward=0.75 std=0.25 discarded=1.0 off_policy=1.0"
    )
    assert art_summaries[3]["printed"].startswith("No history found at ")
    # ART's, reading with polars, lists every row once a `train/reward` column exists: its
    # evaluation rows show up with None; arthex's lists the training rows only
    art_mixed = art_summaries[4]["printed"].splitlines()
    assert any("reward=None" in line for line in art_mixed)
    ours_mixed = our_summaries[4]["printed"].splitlines()
    assert ours_mixed[2:] == art_summaries[0]["printed"].splitlines()[-3:]  # steps 5, 6, 7
    # on what arthex's pipeline writes, ART's stops for want of its two retired keys
    assert art_summaries[5] == {"error": "KeyError: 'train/discarded_stale_groups'"}
    assert our_summaries[5]["printed"].splitlines()[2] == (
        "  step=1 reward=0.25 std=0.25 discarded=0.0 off_policy=1.0"
    )
