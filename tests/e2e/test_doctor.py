"""`arthex doctor` as a subprocess, on a run made by a real short `arthex demo` (the tiny model
trained three steps on CPU by the LocalBackend): healthy, then with a torn history line and a
stale lease, with a damaged line and a lost checkpoint, planned against too little memory, and
given bad arguments. Expected counts come from the files, read with json and os."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.test_cli import arthex_cli, arthex_many, assert_one_line_error, env

pytest.importorskip("torch")
pytestmark = pytest.mark.e2e

HOLD = """
import sys
from pathlib import Path
from arthex.adapters.run_files.lease import FileRunLeases
from arthex.adapters.layout import parse_run_dir
base, run = parse_run_dir(Path(sys.argv[1]))
FileRunLeases(str(base)).acquire_now(run)
print("held", flush=True)
sys.stdin.readline()
"""


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run directory of a three-step demo."""
    base = tmp_path_factory.mktemp("doctor") / ".art"
    done = subprocess.run(
        [sys.executable, "-m", "arthex.apps.cli", "demo", "--steps", "3", "--base-path", str(base)],
        capture_output=True,
        text=True,
        env=env(),
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (run,) = (base / "demo" / "models").iterdir()
    return run


def copy_of(demo: Path, tmp_path: Path) -> Path:
    run = tmp_path / "proj" / "models" / "agent"
    shutil.copytree(demo, run)
    return run


def lines_of(result: subprocess.CompletedProcess[str]) -> dict[str, str]:
    """Each printed check by its name: `ok    history: 6 rows parse` -> {"history": "ok ..."}."""
    found = {}
    for line in result.stdout.splitlines():
        status, rest = line.split(None, 1)
        name, message = rest.split(": ", 1)
        found[name] = f"{status} {message}"
    return found


def test_a_healthy_tiny_model_setup_exits_0(demo: Path) -> None:
    result = arthex_cli("doctor", str(demo))
    assert result.returncode == 0, result.stdout + result.stderr
    checks = lines_of(result)
    assert all(line.startswith("ok ") for line in checks.values()), result.stdout
    for name in ("torch", "transformers", "peft", "gpu", "memory", "template", "wandb"):
        assert name in checks
    rows = [json.loads(line) for line in (demo / "history.jsonl").read_text().splitlines()]
    steps = [row["step"] for row in rows]
    assert checks["history"] == f"ok {len(rows)} rows parse, steps {min(steps)}..{max(steps)}"
    folders = sorted(int(p.name) for p in (demo / "checkpoints").iterdir())
    assert checks["checkpoints"] == f"ok {len(folders)} complete, newest {max(folders)}"
    assert max(folders) == max(steps), "the newest history step has its checkpoint"
    parts = list((demo / "trajectories").rglob("*.parquet"))
    assert checks["trajectories"] == f"ok {len(parts)} file(s) of version 2 (train)"
    assert checks["lease"] == "ok no trainer holds the run"
    base_model = json.loads((demo / "model.json").read_text())["base_model"]
    assert checks["base model"] == f"ok {base_model}", "RUN_DIR's model.json names the model"
    assert "0.1M params, full fine-tuning" in checks["memory"]


def test_a_torn_history_line_and_a_stale_lease_are_both_named(demo: Path, tmp_path: Path) -> None:
    run = copy_of(demo, tmp_path)
    lines = len((run / "history.jsonl").read_text().splitlines())
    with (run / "history.jsonl").open("a") as history:
        history.write('{"step": 4, "train/reward": 0.')  # a write cut short
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(run)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env(),
    )
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    os.kill(holder.pid, signal.SIGKILL)  # the trainer dies holding the lease
    holder.wait(timeout=60)
    result = arthex_cli("doctor", str(run))
    assert result.returncode == 1, result.stdout + result.stderr
    checks = lines_of(result)
    assert checks["history"].startswith(f"warn {run / 'history.jsonl'}: line {lines + 1} is torn")
    assert checks["lease"].startswith(f"warn stale: {run / 'trainer.lease'} names pid {holder.pid}")
    assert json.loads((run / "trainer.lease").read_text())["pid"] == holder.pid, "left as found"
    assert (run / "history.jsonl").read_text().endswith("0."), "left as found"


def test_a_damaged_line_and_a_lost_checkpoint_fail(demo: Path, tmp_path: Path) -> None:
    run = copy_of(demo, tmp_path)
    lines = (run / "history.jsonl").read_text().splitlines()
    lines[1] = "not json"
    (run / "history.jsonl").write_text("\n".join(lines) + "\n")
    newest = max(int(p.name) for p in (run / "checkpoints").iterdir())
    shutil.rmtree(run / "checkpoints" / f"{newest:04d}")
    result = arthex_cli("doctor", str(run))
    assert result.returncode == 2, result.stdout + result.stderr
    checks = lines_of(result)
    assert "1 damaged line(s): line 2 (not valid JSON)" in checks["history"]
    assert checks["history"].startswith("fail ")
    assert checks["checkpoints"].startswith(f"fail the history names step {newest} but")


def test_a_plan_that_does_not_fit_the_stated_memory_says_which_knob_to_turn(demo: Path) -> None:
    base_model = json.loads((demo / "model.json").read_text())["base_model"]
    # as worked in tests/unit/test_doctor_memory.py, on the CPU: rows of 1024 (the tiny
    # model's context, 8 rows) keep 8192 x 8,448 B of layer activations (2 layers x (4*64 +
    # 3*(4+2)*16 + 4*128) x 4 B; unchecked, far below 1 GiB) and 8192 x 2,176 B of one
    # layer's gradients ((4*64 + 3*6*16) x 4 B) = 87,031,808, one log-prob chunk 256 x 637 x
    # 12 B = 1,956,864; with the weights 459,264, AdamW 1,377,792, the engine's two copies
    # 918,528 and its KV cache 8,388,608: 100,132,864 B (95.5 MiB). The first lever is the
    # micro-batch: 4096 tokens keep half the activations (56,616,960 B, 54.0 MiB); then
    # checkpointed layers, a token keeping 2 x 64 x 4 B of inputs plus the rebuilt layer's
    # attention part, 2,176 B, and at backward's peak that part's gradients, 2,176 B (more
    # than the MLP's moment: 1024 x (2,048 + 1,792) + 8192 x 256 = 6,029,312): 8192 x 4,864 =
    # 39,845,888, in all 52,946,944 B (50.5 MiB); then rows of 256 (16 rows, 4096 tokens x
    # 10,624 B, cache 4,194,304): 52,422,656 B, under 64 MiB (rows of 384 need 76,277,760)
    result = arthex_cli("doctor", "--base-model", base_model, "--device-memory", "64MiB")
    assert result.returncode == 2, result.stdout + result.stderr
    memory = lines_of(result)["memory"]
    assert memory.startswith("fail does not fit: 0.1M params, full fine-tuning, rows of 1024")
    assert "needs 95.5 MiB" in memory and "of 64.0 MiB stated (--device-memory)" in memory
    assert memory.split(" -> ", 1)[1].split("; or ") == [
        "a smaller micro-batch (LocalBackend(micro_batch_tokens=4096), from 8192: the same "
        "gradient, more passes)",
        "activation checkpointing (LocalBackend(gradient_checkpointing=True): 50.5 MiB, "
        "about a third more compute)",
        "lower --max-seq-len from 1024 to 256 (shorter rollouts, or "
        "TrainConfig.packed_sequence_length)",
    ]


def test_bad_arguments_are_one_line_exit_2(tmp_path: Path) -> None:
    cases = [
        (["--backend", "gpu"], "--backend must be one of local|tinker|serverless, got 'gpu'"),
        (["--device-memory", "lots"], "--device-memory must be a size such as 24GiB"),
        (["--gpu-memory-utilization", "1.5"], "--gpu-memory-utilization must be above 0"),
        (["--mode", "qlora"], "--mode must be one of auto|lora|full"),
        (["--max-seq-len", "0"], "--max-seq-len"),
        ([str(tmp_path / "nowhere")], "nowhere"),
        (["--device", "cuda"], "--device cuda needs --device-memory"),
    ]
    results = arthex_many(*(["doctor", *args] for args, _ in cases))
    for (args, fragment), result in zip(cases, results, strict=True):
        if args == ["--device", "cuda"] and result.returncode != 2:
            continue  # a machine with a GPU plans for it
        assert_one_line_error(result, fragment)
        assert result.stdout == "", "refused before any check ran"
