"""arthex's own output off a terminal carries none of its dependencies' noise: a LoRA run on
LocalBackend (tiny model written, weights loaded by the trainer and the inference engine, a
step trained, the step exported merged) prints no transformers progress bar and no peft
`is_gradient_checkpointing` FutureWarning; `make setup`'s editable install prints no
setuptools strict-editable notice."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
NOISE = ("Loading weights", "Writing model shards", "is_gradient_checkpointing", "it/s]")

SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    from arthex.adapters.local import LocalBackend
    from arthex.adapters.local.export import export_checkpoint
    from arthex.composition.api import TrainableModel
    from arthex.core.trajectories import Trajectory, trajectory_group
    from arthex.testing.tiny_model import tiny_model

    async def main(folder: str) -> None:
        base = tiny_model(folder + "/tiny")
        model = TrainableModel(name="quiet", project="p", base_model=base,
                               base_path=folder + "/runs", report_metrics=[])
        backend = LocalBackend(engine="torch", full_finetune=False, seed=0)
        try:
            await model.register(backend)
            client = model.openai_client()

            async def one(i: int) -> Trajectory:
                messages = [{"role": "user", "content": "Say a number."}]
                done = await client.chat.completions.create(
                    model=model.get_inference_name(), messages=messages, max_tokens=4,
                    logprobs=True)
                return Trajectory(messages_and_choices=[*messages, done.choices[0]],
                                  reward=float(i))

            groups = [await trajectory_group(one(i) for i in range(2))]
            await model.train(groups, progress=False)
        finally:
            await backend.close()
            await model.close()
        export_checkpoint(folder + "/runs/p/models/quiet", folder + "/merged")
        print("done")

    asyncio.run(main(sys.argv[1]))
    """
)


def test_a_lora_run_and_its_export_print_no_dependency_noise_off_a_terminal(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "done"
    assert (tmp_path / "merged" / "config.json").is_file()
    said = [noise for noise in NOISE if noise in done.stderr]
    assert not said, done.stderr[-3000:]


def test_the_editable_install_of_make_setup_ignores_setuptools_strict_notice() -> None:
    """The Makefile's filter, given to a Python that emits the very notice setuptools gives a
    strict editable install, leaves nothing on stderr; the notice alone is shown."""
    setuptools_warnings = pytest.importorskip("setuptools.warnings")
    assert setuptools_warnings is not None
    planned = subprocess.run(
        ["make", "-n", "-B", "setup"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    editable = next(line for line in planned.splitlines() if "editable_mode=strict" in line)
    found = re.search(r"PYTHONWARNINGS=\"([^\"]+)\"", editable)
    assert found, f"the editable install sets no warning filter: {editable}"
    notice = (
        "from setuptools.warnings import InformationOnly\n"
        "InformationOnly.emit('Editable installation.', 'Strict editable installation "
        "performed using the auxiliary directory')"
    )
    shown = subprocess.run(
        [sys.executable, "-c", notice], capture_output=True, text=True, timeout=60
    )
    assert "Strict editable installation" in shown.stderr
    filtered = subprocess.run(
        [sys.executable, "-W", found.group(1), "-c", notice],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert filtered.stderr == ""
