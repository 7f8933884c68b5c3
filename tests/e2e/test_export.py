"""Export: a fine-tuned step of a LocalBackend run, written as a merged Hugging Face model and as
a PEFT adapter, loaded by plain transformers/peft in a process that never imports arthex, gives
the logits arthex serves for that step (within 1e-4), for full fine-tunes and LoRA, tied and
untied embeddings, and LoRA on a tied output head.

One module fixture trains every kind of run (one SFT step each; a second for the CLI's --step),
exports it, and runs ONE clean subprocess that loads every export and reports its logits and
greedy replies. The served side is read twice: raw logits from the serving engine's own weight
loader at that step's checkpoint, and the HTTP endpoint's greedy reply and logprobs.
"""

from __future__ import annotations

import asyncio
import json
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")

import arthex
from arthex.adapters.local import LocalBackend
from arthex.adapters.local.trainer import DEFAULT_LORA_TARGETS
from arthex.core.errors import InvalidInputError, UnsupportedCapability
from arthex.core.sft import TrainSFTConfig
from arthex.testing.contracts.sft import SFT_DATA
from arthex.testing.fakes import InMemoryBackend
from arthex.testing.tiny_model import tiny_model

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TOLERANCE = 1e-4
TOKENS = [1, 3, 40, 41, 42, 100, 200, 300, 7, 8, 9, 2]
PROMPT = [{"role": "user", "content": SFT_DATA[0][0]}]
DATA = [[{"role": "user", "content": q}, {"role": "assistant", "content": a}] for q, a in SFT_DATA]


@attrs.frozen
class Case:
    name: str
    tied: bool
    full: bool
    targets: tuple[str, ...] = DEFAULT_LORA_TARGETS


CASES = (
    Case("full-tied", tied=True, full=True),
    Case("full-untied", tied=False, full=True),
    Case("lora-tied", tied=True, full=False),
    Case("lora-untied", tied=False, full=False),
    Case("lora-head-tied", tied=True, full=False, targets=(*DEFAULT_LORA_TARGETS, "lm_head")),
)

# The start of a script for a clean interpreter (`python -I`) that refuses to import arthex.
WITHOUT_ARTHEX = r"""
import importlib.abc, json, sys

class NoArthex(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "arthex" or name.startswith("arthex."):
            raise ImportError("the exported model must load without arthex")

sys.meta_path.insert(0, NoArthex())
"""

CLEAN_LOADER = (
    WITHOUT_ARTHEX
    + r"""
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer

job = json.load(sys.stdin)
out = {}

def report(model, tokenizer):
    with torch.no_grad():
        logits = model(torch.tensor([job["tokens"]])).logits[0]
        prompt = tokenizer.apply_chat_template(
            job["prompt"], add_generation_prompt=True, tokenize=True, return_dict=False
        )
        generated = model.generate(
            torch.tensor([prompt]), max_new_tokens=8, do_sample=False,
            pad_token_id=tokenizer.pad_token_id, output_logits=True, return_dict_in_generate=True,
        )
    completion = generated.sequences[0, len(prompt):].tolist()
    logprobs = [
        torch.log_softmax(step[0].float(), -1)[token].item()
        for step, token in zip(generated.logits, completion)
    ]
    return {
        "logits": logits.tolist(), "prompt": prompt, "completion": completion,
        "logprobs": logprobs, "tied": bool(model.config.tie_word_embeddings),
    }

for name, case in job["cases"].items():
    merged = AutoModelForCausalLM.from_pretrained(case["merged"], dtype=torch.float32)
    out[name] = {"merged": report(merged, AutoTokenizer.from_pretrained(case["merged"]))}
    if case.get("peft"):
        base = AutoModelForCausalLM.from_pretrained(case["base"], dtype=torch.float32)
        adapted = PeftModel.from_pretrained(base, case["peft"])
        out[name]["peft"] = report(adapted, AutoTokenizer.from_pretrained(case["peft"]))
assert not any(m == "arthex" or m.startswith("arthex.") for m in sys.modules)
json.dump(out, sys.stdout)
"""
)


@attrs.frozen
class Served:
    logits: list[list[float]]
    completion: list[int]
    logprobs: list[float]
    checkpoint: Path


@attrs.frozen
class Built:
    root: Path
    base: dict[str, str]
    served: dict[str, Served]
    exports: dict[str, dict[str, str]]
    loaded: dict[str, dict[str, Any]]


async def _train_and_export(case: Case, base: str, root: Path) -> tuple[Served, dict[str, str]]:
    model = arthex.TrainableModel(
        name=case.name, project="export", base_model=base, base_path=str(root), report_metrics=[]
    )
    backend = LocalBackend(  # CPU: float32 on both sides of the comparison, GPU or not
        engine="torch",
        device="cpu",
        full_finetune=case.full,
        lora_rank=4,
        lora_target_modules=case.targets,
    )
    try:
        await model.register(backend)
        config = TrainSFTConfig(learning_rate=1e-2, epochs=4, batch_size=3)
        await model.train_sft(DATA, config)
        client = model.openai_client()
        response = await client.chat.completions.create(
            model=model.get_inference_name(1),
            messages=PROMPT,  # type: ignore[arg-type]
            max_tokens=8,
            temperature=0,
            logprobs=True,
        )
        choice = response.choices[0]
        assert choice.logprobs is not None and choice.logprobs.content is not None
        exports = {"merged": await model.export(str(root / "out" / case.name / "merged"))}
        if not case.full:
            exports["peft"] = await model.export(
                str(root / "out" / case.name / "peft"), step=1, format="peft"
            )
        await model.train_sft(DATA, TrainSFTConfig(learning_rate=1e-2, batch_size=3))  # step 2
        checkpoint = root / "export" / "models" / case.name / "checkpoints" / "0001"
        served = Served(
            logits=_engine_logits(base, checkpoint),
            completion=list((choice.model_extra or {})["token_ids"]),
            logprobs=[t.logprob for t in choice.logprobs.content],
            checkpoint=checkpoint,
        )
        return served, exports
    finally:
        await backend.close()
        await model.close()


def _engine_logits(base: str, checkpoint: Path) -> list[list[float]]:
    """The logits of the step as the serving engine holds it (its own weight loader)."""
    import torch

    from arthex.adapters.inference._weights import ModelWeights

    weights = ModelWeights(base, device="cpu", dtype="float32")
    weights.load_base()
    loaded = weights.load(str(checkpoint))
    with torch.no_grad(), weights.module_for(loaded) as module:
        logits: list[list[float]] = module(torch.tensor([TOKENS])).logits[0].tolist()
    return logits


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    root = tmp_path_factory.mktemp("export")
    bases = {
        True: tiny_model(root / "tiny-tied"),
        False: tiny_model(root / "tiny-untied", tied=False),
    }
    served: dict[str, Served] = {}
    exports: dict[str, dict[str, str]] = {}
    for case in CASES:
        served[case.name], exports[case.name] = asyncio.run(
            _train_and_export(case, bases[case.tied], root)
        )
    job = {
        "tokens": TOKENS,
        "prompt": PROMPT,
        "cases": {case.name: {**exports[case.name], "base": bases[case.tied]} for case in CASES},
    }
    result = subprocess.run(
        [sys.executable, "-I", "-c", CLEAN_LOADER],
        input=json.dumps(job),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    base_of = {case.name: bases[case.tied] for case in CASES}
    return Built(root, base_of, served, exports, json.loads(result.stdout))


def _max_difference(a: list[list[float]], b: list[list[float]]) -> float:
    return max(abs(x - y) for row_a, row_b in zip(a, b, strict=True) for x, y in zip(row_a, row_b))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_merged_export_gives_the_served_logits_without_arthex(built: Built, case: Case) -> None:
    served, loaded = built.served[case.name], built.loaded[case.name]["merged"]
    assert _max_difference(loaded["logits"], served.logits) < TOLERANCE
    assert loaded["completion"] == served.completion
    assert loaded["logprobs"] == pytest.approx(served.logprobs, abs=TOLERANCE)
    # a LoRA on a tied head is merged into an untied copy; everything else keeps its tying
    assert loaded["tied"] == (case.tied and "lm_head" not in case.targets)


@pytest.mark.parametrize("case", [c for c in CASES if not c.full], ids=lambda c: c.name)
def test_the_peft_export_on_the_base_gives_the_served_logits(built: Built, case: Case) -> None:
    served, loaded = built.served[case.name], built.loaded[case.name]["peft"]
    assert _max_difference(loaded["logits"], served.logits) < TOLERANCE
    assert loaded["completion"] == served.completion


def test_the_fine_tuning_changed_the_weights_so_the_comparison_means_something(
    built: Built,
) -> None:
    for case in CASES:
        untrained = built.served[case.name].checkpoint.parent / "0000"
        before = _engine_logits(built.base[case.name], untrained)
        assert _max_difference(before, built.served[case.name].logits) > 1e-2, case.name


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_exports_hold_the_standard_files_and_the_base_tokenizer_byte_for_byte(
    built: Built, case: Case
) -> None:
    base = Path(built.base[case.name])
    merged = Path(built.exports[case.name]["merged"])
    names = {p.name for p in merged.iterdir()}
    assert {"config.json", "model.safetensors", "generation_config.json"} <= names
    assert not any(name.startswith(("optimizer", "trainer_state")) for name in names)
    # every file is readable as a new file is here (0644 under the usual umask), the weights too
    probe = merged.parent / f"probe-{case.name}"
    probe.write_bytes(b"")
    new_file = stat.S_IMODE(probe.stat().st_mode)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in merged.iterdir()}
    assert modes == dict.fromkeys(names, new_file), modes
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        assert (merged / name).read_bytes() == (base / name).read_bytes(), name
    assert (merged / "generation_config.json").read_bytes() == (
        base / "generation_config.json"
    ).read_bytes()
    if not case.full:
        peft = Path(built.exports[case.name]["peft"])
        checkpoint = built.served[case.name].checkpoint
        for name in ("adapter_config.json", "adapter_model.safetensors"):
            assert (peft / name).read_bytes() == (checkpoint / name).read_bytes()
        assert (peft / "tokenizer.json").read_bytes() == (base / "tokenizer.json").read_bytes()


def test_the_cli_exports_an_older_step_and_refuses_mistakes(built: Built) -> None:
    run = built.root / "export" / "models" / "lora-tied"
    out = built.root / "cli-step1"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "arthex.apps.cli", "export", str(run), *args],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )

    done = cli("--step", "1", "--format", "merged", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"exported step 1 of export/lora-tied (merged) to {out}"
    latest = cli("--format", "peft", "--out", str(built.root / "cli-latest"))
    newest = max(int(p.name) for p in (run / "checkpoints").iterdir())
    assert latest.stdout.strip() == (
        f"exported step {newest} of export/lora-tied (peft) to {built.root / 'cli-latest'}"
    ), latest.stderr
    reference = Path(built.exports["lora-tied"]["merged"]) / "model.safetensors"
    assert _same_tensors(out / "model.safetensors", reference)
    again = cli("--step", "1", "--out", str(out))
    assert again.returncode == 2 and "not an empty folder" in again.stderr
    missing = cli("--step", "9", "--out", str(built.root / "cli-none"))
    assert missing.returncode == 2 and "no checkpoint of step 9" in missing.stderr
    assert not (built.root / "cli-none").exists()
    full = built.root / "export" / "models" / "full-tied"
    refused = subprocess.run(
        [
            sys.executable,
            "-m",
            "arthex.apps.cli",
            "export",
            str(full),
            "--format",
            "peft",
            "--out",
            str(built.root / "cli-peft"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert refused.returncode == 2 and "full fine-tuning" in refused.stderr


def _same_tensors(a: Path, b: Path) -> bool:
    from safetensors.torch import load_file

    left, right = load_file(str(a)), load_file(str(b))
    return left.keys() == right.keys() and all(bool((left[k] == right[k]).all()) for k in left)


def test_export_without_the_capability_is_refused(tmp_path: Path) -> None:
    async def main() -> None:
        model = arthex.TrainableModel(
            name="m", project="p", base_model="x", base_path=str(tmp_path), report_metrics=[]
        )
        await model.register(InMemoryBackend())
        with pytest.raises(UnsupportedCapability, match="'export'"):
            await model.export(str(tmp_path / "out"))
        with pytest.raises(InvalidInputError, match="format"):
            await model.export(str(tmp_path / "out"), format="gguf")  # type: ignore[arg-type]
        await model.close()

    asyncio.run(main())
    assert not (tmp_path / "out").exists()


def test_a_step_being_exported_survives_a_concurrent_delete(tmp_path: Path) -> None:
    async def main() -> tuple[list[int], list[int], Path]:
        model = arthex.TrainableModel(
            name="m",
            project="p",
            base_model=tiny_model(tmp_path / "tiny"),
            base_path=str(tmp_path),
            report_metrics=[],
        )
        backend = LocalBackend(engine="torch", full_finetune=True)
        try:
            await model.register(backend)
            for _ in range(2):
                await model.train_sft(DATA, TrainSFTConfig(learning_rate=1e-3, batch_size=3))
            exporting = asyncio.create_task(model.export(str(tmp_path / "out"), step=1))
            await asyncio.sleep(0)  # the task runs up to its worker thread, step 1 pinned
            deleted = await backend.delete_checkpoint_files(model.run, set())
            folder = Path(await exporting)
            return deleted, await backend.checkpoint_steps(model.run), folder
        finally:
            await backend.close()
            await model.close()

    deleted, left, folder = asyncio.run(main())
    assert deleted == [0]
    assert left == [1, 2]
    assert (folder / "model.safetensors").is_file()


def test_an_unloadable_base_model_is_one_line_and_writes_nothing(tmp_path: Path) -> None:
    run = tmp_path / "p" / "models" / "m"
    checkpoint = run / "checkpoints" / "0001"
    checkpoint.mkdir(parents=True)
    state = {"format": 1, "step": 1, "mode": "full", "base_model": "./moved-away"}
    (checkpoint / "trainer_state.json").write_text(json.dumps(state))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "arthex.apps.cli",
            "export",
            str(run),
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert "cannot load the run's base model './moved-away'" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p"]
