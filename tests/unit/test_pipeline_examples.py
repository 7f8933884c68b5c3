"""ART 0.5.23's two pipeline examples under `arthex.art.pipeline_trainer`: their pure helpers on
worked examples read off ART's code and docstrings (the interop suite compares them with ART's
own functions: tests/interop/test_art_pipeline_examples.py), the history summary on a real
ledger file, and how the examples pick their backend and read their settings."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from openai.types.chat.chat_completion import Choice

import arthex
from arthex.apps.examples import runtime
from arthex.art.pipeline_trainer import binary_prefix_tool_pipeline as bits
from arthex.art.pipeline_trainer import yes_no_maybe_pipeline as ynm
from arthex.core.errors import InvalidInputError

SECRET = "110000110100101011111010101011"  # ART's SECRET_BITS


# -- yes / no / maybe ----------------------------------------------------------------------------


def test_the_constants_are_arts() -> None:
    assert (ynm.BASE_MODEL, ynm.MODEL_NAME, ynm.PROJECT) == (
        "Qwen/Qwen3-30B-A3B-Instruct-2507",
        "pipeline-yes-no-maybe",
        "yes-no-maybe-pipeline",
    )
    assert (ynm.ROLLOUTS_PER_SCENARIO, ynm.MAX_TOKENS, ynm.MAX_STEPS) == (32, 5, 20)
    assert (ynm.EVAL_TRAJECTORY_COUNT, ynm.EVAL_EVERY_N_STEPS) == (30, 2)


def test_the_scenarios_are_every_lead_in_quoting_and_ordering_of_the_words() -> None:
    prompts = [scenario["prompt"] for scenario in ynm.build_scenarios()]
    # 2 lead-ins x quoted or not x (6 ordered triples + 6 ordered pairs)
    assert len(prompts) == 48 == len(set(prompts))
    assert prompts[0] == "respond with 'yes', 'no', 'maybe'"
    assert prompts[6] == "respond with 'yes' or 'no'"
    assert prompts[12] == "respond with yes, no, maybe"
    assert prompts[-1] == "just respond with maybe or no"
    assert all(list(scenario) == ["prompt"] for scenario in ynm.build_scenarios())


@pytest.mark.parametrize(
    ("text", "reward"),
    [
        ("maybe", 1.0),
        ("no", 0.75),
        ("yes", 0.5),
        ("Maybe.", 1.0),
        ("  'NO', I think", 0.75),
        ('"yes"!', 0.5),
        ("(maybe)", 1.0),
        ("yes\nno", 0.5),
        ("\u00a0maybe\u2003so", 1.0),
        ("maybe-not", 0.0),
        ("nope", 0.0),
        ("I say yes", 0.0),
        ("", 0.0),
        ("   \n\t", 0.0),
        ("...", 0.0),
    ],
)
def test_the_reward_reads_the_first_word(text: str, reward: float) -> None:
    assert ynm.reward_for_answer(text) == reward


# -- binary prefix -----------------------------------------------------------------------------


def test_the_tool_and_prompts_are_arts() -> None:
    assert (bits.TOOL_NAME, bits.SECRET_BITS, bits.SECRET_LEN) == ("make_guess", SECRET, 30)
    function: Any = bits.TOOLS[0]["function"]
    assert function["name"] == "make_guess"
    assert function["parameters"]["required"] == ["guess"]
    assert (
        "length 30 consisting of 0 and 1"
        in function["parameters"]["properties"]["guess"]["description"]
    )
    assert bits.TOOL_CHOICE == {"type": "function", "function": {"name": "make_guess"}}
    assert bits.SYSTEM_PROMPT.startswith("You are playing a prefix-guessing game. You must call")
    assert "a 30-character string of only 0 and 1." in bits.SYSTEM_PROMPT
    assert bits.USER_PROMPT == "Call the tool with your best binary guess."
    config = bits.PipelineConfig(1.0, 0.0, 300)
    assert (config.temperature, config.eval_temperature, config.max_tokens) == (1.0, 0.0, 300)


@pytest.mark.parametrize(
    ("guess", "valid", "prefix"),
    [
        (SECRET, True, 30),
        ("1100", True, 4),
        ("1101", True, 3),
        ("0", True, 0),
        ("", True, 0),  # ART counts the empty guess valid; it shares nothing
        (SECRET + "0", True, 30),
        ("11 00", False, 2),
        ("1102", False, 3),
    ],
)
def test_a_guess_is_bits_and_earns_its_shared_prefix(guess: str, valid: bool, prefix: int) -> None:
    assert bits.is_valid_guess(guess) is valid
    assert bits.shared_prefix_len(guess, SECRET) == prefix
    assert bits.shared_prefix_len(SECRET, guess) == prefix


def choice(*calls: tuple[str, str], content: str | None = None) -> Choice:
    tool_calls = [
        {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": arguments}}
        for i, (name, arguments) in enumerate(calls)
    ]
    message = {"role": "assistant", "content": content, "tool_calls": tool_calls or None}
    return Choice.model_validate({"index": 0, "finish_reason": "stop", "message": message})


@pytest.mark.parametrize(
    ("arguments", "guess"),
    [
        ('{"guess": "0101"}', "0101"),
        ('  {"guess": "0101", "why": "x"}  ', "0101"),
        ('Sure! {"guess": "111"} done', "111"),
        ('{"guess": 101}', "101"),
        ('{"guess": true}', "True"),
        ('{"guess": null, "x": 1} guess="10"', "10"),
        ("guess: '0011'", "0011"),
        ('guess = "1"', "1"),
        ("0101 1100", "0101 1100"),
        ("1", "1"),
        ('{"answer": "0101"}', None),
        ("[1, 0]", None),
        ("abc", None),
        ("", None),
        ("   ", None),
    ],
)
def test_the_guess_is_read_from_the_tool_calls_arguments(arguments: str, guess: str | None) -> None:
    expected = (guess, "tool_call") if guess is not None else (None, "missing")
    assert bits.extract_guess(choice(("make_guess", arguments))) == expected


def test_only_make_guess_calls_count_and_the_first_with_a_guess_wins() -> None:
    two = choice(
        ("other", '{"guess": "1"}'), ("make_guess", "{}"), ("make_guess", '{"guess":"01"}')
    )
    assert bits.extract_guess(two) == ("01", "tool_call")
    assert bits.extract_guess(choice(content='{"guess": "1"}')) == (None, "missing")
    as_dicts = SimpleNamespace(
        message=SimpleNamespace(
            tool_calls=[
                "not a call",
                {"function": {"name": "make_guess", "arguments": '{"guess": "11"}'}},
            ]
        )
    )
    assert bits.extract_guess(as_dicts) == ("11", "tool_call")
    assert bits.extract_guess(SimpleNamespace(message=SimpleNamespace())) == (None, "missing")


# -- the run's files ---------------------------------------------------------------------------


def write_history(run_dir: Path, rows: list[dict[str, Any]]) -> None:
    run_dir.mkdir(parents=True)
    stamp = {"recorded_at": "2026-01-01T00:00:00+00:00"}
    lines = [json.dumps({**row, "training_step": row["step"], **stamp}) for row in rows]
    (run_dir / "history.jsonl").write_text("".join(f"{line}\n" for line in lines))


def test_the_output_dir_is_the_runs_and_the_summary_reads_its_history(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = arthex.Model(name="agent", project="bits", base_path=str(tmp_path), report_metrics=[])
    run_dir = tmp_path / "bits" / "models" / "agent"
    assert bits.get_model_output_dir(model) == run_dir
    bits.print_history_summary(model)
    assert capsys.readouterr().out == f"No history found at {run_dir / 'history.jsonl'}\n"

    # arthex's pipeline: a batch's train row, then the update's row with its discards and age
    rows: list[dict[str, Any]] = []
    for step in range(1, 8):
        rows.append({"step": step, "train/reward": step / 10, "train/reward_std_dev": 0.5})
        rows.append({"step": step + 1, "discarded/cum/stale_groups": float(step),
                     "offpolicy/token_weighted_policy_age_steps": 1.5})  # fmt: skip
        rows.append({"step": step + 1, "val/reward": 0.9})
    write_history(run_dir, rows)
    bits.print_history_summary(model, tail=2)
    assert capsys.readouterr().out == (
        "\nRecent training metrics:\n"
        "  step=6 reward=0.6 std=0.5 discarded=6.0 off_policy=1.5\n"
        "  step=7 reward=0.7 std=0.5 discarded=7.0 off_policy=1.5\n"
    )
    bits.print_history_summary(model)
    assert capsys.readouterr().out.count("\n  step=") == 5


def test_the_summary_prefers_arts_own_keys_and_shows_a_missing_one_as_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = arthex.Model(name="agent", project="bits", base_path=str(tmp_path), report_metrics=[])
    write_history(
        tmp_path / "bits" / "models" / "agent",
        [
            {"step": 1, "train/reward": 2.0, "train/reward_std_dev": 1.0,
             "train/discarded_stale_groups": 3.0, "train/steps_off_policy": 0.0,
             "discarded/cum/stale_groups": 9.0},
            {"step": 2, "train/reward": 4.0},
        ],
    )  # fmt: skip
    bits.print_history_summary(model)
    assert capsys.readouterr().out.splitlines()[2:] == [
        "  step=1 reward=2.0 std=1.0 discarded=3.0 off_policy=0.0",
        "  step=2 reward=4.0 std=None discarded=None off_policy=None",
    ]


# -- backend, base model and settings ------------------------------------------------------------


def test_tinker_when_a_key_is_set_else_this_machine_unless_told() -> None:
    assert runtime.backend_kind({}) == "local"
    assert runtime.backend_kind({"TINKER_API_KEY": "tml-x"}) == "tinker"
    assert runtime.backend_kind({"TINKER_API_KEY": "tml-x", "ARTHEX_BACKEND": "Local"}) == "local"
    assert runtime.backend_kind({"ARTHEX_BACKEND": "local"}) == "local"
    with pytest.raises(InvalidInputError, match=r"ARTHEX_BACKEND=tinker needs .*TINKER_API_KEY"):
        runtime.backend_kind({"ARTHEX_BACKEND": "tinker"})
    with pytest.raises(InvalidInputError, match=r"must be one of tinker, local, got 'vllm'"):
        runtime.backend_kind({"ARTHEX_BACKEND": "vllm"})
    assert runtime.base_model("tinker", ynm.BASE_MODEL, {}) == ynm.BASE_MODEL
    assert runtime.base_model("local", ynm.BASE_MODEL, {}) == runtime.LOCAL_BASE_MODEL
    assert runtime.base_model("local", ynm.BASE_MODEL, {"BASE_MODEL": "./m"}) == "./m"


def test_the_env_file_fills_only_what_is_unset(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text(
        "# keys\nTINKER_API_KEY='tml-1'\n\nexport BASE_MODEL=\"Qwen/Qwen3-4B\"\nPROJECT=mine\n"
    )
    environ = {"PROJECT": "kept"}
    added = runtime.load_env_file(env_file, environ)
    assert added == {"TINKER_API_KEY": "tml-1", "BASE_MODEL": "Qwen/Qwen3-4B"}
    assert environ == {"PROJECT": "kept", **added}
    assert runtime.load_env_file(tmp_path / "absent", environ) == {}
    env_file.write_text("MODE=fast # the quick one\nFLAG\nURL='http://h/#x'\n")
    assert runtime.load_env_file(env_file, {}) == {"MODE": "fast", "URL": "http://h/#x"}
    env_file.write_text("A=1\nnot a key=2\n")
    with pytest.raises(InvalidInputError, match=r"\.env:2 is not a KEY=VALUE line"):
        runtime.load_env_file(env_file, {})


def test_the_binary_prefix_settings_are_arts_environment_with_its_defaults() -> None:
    settings = bits_settings({"RUN_SUFFIX": "s1"})
    assert settings.model_name == "pipeline-binary-prefix-tool-s1"
    assert settings.project == "binary-prefix-tool-pipeline" and settings.art_path is None
    assert (settings.min_batch_size, settings.num_rollout_workers) == (4, 8)
    assert (settings.rollouts_per_scenario, settings.max_steps_off_policy) == (8, 6)
    assert settings.max_batch_size is None and settings.lora_rank is None
    assert (settings.eval_every_n_steps, settings.eval_at_start, settings.max_steps) == (
        2,
        True,
        10,
    )
    assert (settings.save_checkpoint, settings.resume) == (False, False)
    assert (settings.temperature, settings.eval_temperature, settings.max_tokens) == (1.0, 0.0, 300)
    assert (settings.request_timeout, settings.log_interval_seconds) == (60.0, 60.0)
    assert (settings.learning_rate, settings.scenario_count) == (1e-4, 1000)
    given = bits_settings({"SAVE_CHECKPOINT": "1", "MAX_BATCH_SIZE": "12", "LORA_RANK": "16",
                           "EVAL_AT_START": "0", "SCENARIO_COUNT": "-3",
                           "MODEL_NAME": "m"})  # fmt: skip
    assert (given.save_checkpoint, given.resume, given.max_batch_size) == (True, True, 12)
    assert (given.lora_rank, given.eval_at_start, given.scenario_count) == (16, False, 1)
    assert given.model_name.startswith("m-") and len(given.model_name) == 10
    with pytest.raises(InvalidInputError, match=r"MAX_STEPS must be an integer, got 'ten'"):
        bits_settings({"MAX_STEPS": "ten"})
    with pytest.raises(InvalidInputError, match=r"LEARNING_RATE must be a number, got ''"):
        bits_settings({"LEARNING_RATE": ""})


def test_resume_without_saved_checkpoints_is_turned_off(capsys: pytest.CaptureFixture[str]) -> None:
    assert bits_settings({"RESUME": "1"}).resume is False
    assert "RESUME=1 but SAVE_CHECKPOINT=0; disabling resume" in capsys.readouterr().out


def bits_settings(environ: dict[str, str]) -> Any:
    from arthex.apps.examples.binary_prefix_tool import Settings

    return Settings.from_env(environ)
