"""A run directory as ART's LocalBackend leaves it: `checkpoints/NNNN/` holding a PEFT LoRA
adapter each (what Unsloth's `trainer.save_model` writes: `adapter_model.safetensors`,
`adapter_config.json`, a README), ART's LoRA shape (r=8, alpha=16, the seven projections), no
optimizer state and no arthex state file. Step 0 is a fresh adapter (its B matrices zero, so
it is the base model), each later step a different one."""

from __future__ import annotations

import hashlib
from pathlib import Path

ART_LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def write_art_adapters(model_dir: Path, base_model: str, steps: int) -> list[Path]:
    """Adapters for steps 0..steps-1 under `model_dir/checkpoints`; returns their folders."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    folders = []
    for step in range(steps):
        base = AutoModelForCausalLM.from_pretrained(base_model)
        config = LoraConfig(
            r=8, lora_alpha=16, target_modules=ART_LORA_TARGETS, lora_dropout=0.0,
            bias="none", task_type="CAUSAL_LM",
        )  # fmt: skip
        torch.manual_seed(1000 + step)
        model = get_peft_model(base, config)
        if step > 0:
            with torch.no_grad():
                for name, parameter in model.named_parameters():
                    if "lora_B" in name:
                        parameter.normal_(0.0, 0.05 * step)
        folder = model_dir / "checkpoints" / f"{step:04d}"
        model.save_pretrained(str(folder))
        folders.append(folder)
    return folders


def snapshot(folders: list[Path]) -> dict[str, str]:
    """Every file below the folders with its sha256: to prove nothing was rewritten."""
    return {
        str(path): hashlib.sha256(path.read_bytes()).hexdigest()
        for folder in folders
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }
