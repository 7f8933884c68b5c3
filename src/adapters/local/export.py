"""A checkpoint in standard formats: a PEFT adapter directory, or a merged Hugging Face model
directory that plain `transformers.AutoModelForCausalLM.from_pretrained` loads (no arthex).

    export_checkpoint(model_dir, out_dir, step=None, format="merged")

"peft" (LoRA runs only): the checkpoint's `adapter_config.json` and `adapter_model.safetensors`
byte for byte, plus the base model's tokenizer files, so `PeftModel.from_pretrained(base, dir)`
and `AutoTokenizer.from_pretrained(dir)` both work. "merged": the base weights with the step's
update applied (LoRA merged in, or a full fine-tune's weights), saved as safetensors with the
config, the generation config and the tokenizer files (the chat template among them).

Decisions, several of them answers to known export bugs elsewhere:
- Tokenizer files are copied byte for byte from the base model, never re-saved through a
  tokenizer object (re-saving rewrites `tokenizer_config.json` and can lose the template).
  `generation_config.json` is the base's as well.
- Tied embeddings: a LoRA on the output head (or on the input embeddings) of a model whose head
  shares the embedding matrix changes one side only while it is unmerged, which is how it was
  trained and served. Merging it into the shared matrix would change both, so the head is
  untied first (its own copy, `tie_word_embeddings: false`) and the delta goes where it acted.
  A full fine-tune trains the shared matrix as one, and stays tied.
- The merged weights keep the base model's dtype (a full fine-tune's float32 master weights
  are cast to it); `dtype=` picks another.
- The output folder is new or empty; it is written as a temp sibling and renamed into place,
  so a failed export leaves nothing behind. The checkpoint is only read.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Literal

from ...core.errors import CorruptDataError, InvalidInputError, MissingExtraError
from ..files import new_folder, readable_like_new_files
from ..hf_quiet import quiet_hf
from ..hub import one_line, resolve_base_model
from . import checkpoint_io
from . import checkpoints as ckpt

ExportFormat = Literal["peft", "merged"]
FORMATS: tuple[str, ...] = ("peft", "merged")
DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16")
TOKENIZER_FILES: tuple[str, ...] = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    "vocab.json",
    "merges.txt",
    "vocab.txt",
    "tokenizer.model",
    "spiece.model",
)
GENERATION_CONFIG = "generation_config.json"
ADAPTER_FILES: tuple[str, ...] = ("adapter_config.json", "adapter_model.safetensors")
_EMBEDDING_MODULES = ("lm_head", "embed_tokens", "wte", "embed_out", "output")


def export_checkpoint(
    model_dir: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    step: int | None = None,
    format: ExportFormat = "merged",
    dtype: str | None = None,
) -> Path:
    """Write step `step` (latest when None) of the run in `model_dir` into `out_dir`."""
    if format not in FORMATS:
        raise InvalidInputError(f"format must be one of {FORMATS}, got {format!r}")
    if dtype is not None and dtype not in DTYPES:
        raise InvalidInputError(f"dtype must be one of {DTYPES} or None, got {dtype!r}")
    run_dir = Path(model_dir)
    source, state = _checkpoint(run_dir, step)
    full = state.get("mode") == "full"
    if format == "peft" and full:
        raise InvalidInputError(
            f"step {state.get('step')} of {run_dir} was trained by full fine-tuning, so there is "
            "no adapter to export; use format 'merged'"
        )
    base = state.get("base_model")
    if not isinstance(base, str) or not base:
        raise CorruptDataError(f"{source / ckpt.STATE_FILE} names no base_model")
    return _export(source, base, full, Path(out_dir), format, dtype)


def export_adapter(
    adapter_dir: Path,
    base_model: str,
    out_dir: str | os.PathLike[str],
    *,
    format: ExportFormat = "merged",
    dtype: str | None = None,
) -> Path:
    """Write the PEFT LoRA adapter in `adapter_dir` (`adapter_config.json`,
    `adapter_model.safetensors`) over `base_model` into `out_dir`, as `export_checkpoint` does
    a run's step: for adapters trained elsewhere (a Tinker run's downloaded weights)."""
    if format not in FORMATS:
        raise InvalidInputError(f"format must be one of {FORMATS}, got {format!r}")
    if dtype is not None and dtype not in DTYPES:
        raise InvalidInputError(f"dtype must be one of {DTYPES} or None, got {dtype!r}")
    return _export(adapter_dir, base_model, False, Path(out_dir), format, dtype)


def _export(
    source: Path, base: str, full: bool, target: Path, format: str, dtype: str | None
) -> Path:
    with new_folder(target) as temp:
        if format == "peft":
            for name in ADAPTER_FILES:
                shutil.copyfile(source / name, temp / name)
        else:
            _write_merged(base, source, full, temp, dtype)
        for path in _tokenizer_files(base):
            shutil.copyfile(path, temp / path.name)
        readable_like_new_files(temp)
    return target


def checkpoint_step(model_dir: str | os.PathLike[str], step: int | None = None) -> int:
    """The step `export_checkpoint` writes for `step` (the latest checkpoint when None)."""
    source, _state = _checkpoint(Path(model_dir), step)
    return int(source.name)


def _checkpoint(run_dir: Path, step: int | None) -> tuple[Path, dict[str, Any]]:
    steps = ckpt.complete_steps(run_dir)
    if not steps:
        hint = ""
        if (run_dir / "tinker-run.json").is_file():
            hint = (
                ": it is a Tinker run, whose weights live in the Tinker service (export it "
                "with model.export() on a TinkerBackend, which downloads them)"
            )
        elif not run_dir.is_dir():
            hint = ": no such directory"
        raise InvalidInputError(f"{run_dir} has no local checkpoints to export{hint}")
    if step is None:
        step = steps[-1]
    if step not in steps:
        raise InvalidInputError(
            f"{run_dir} has no checkpoint of step {step}; its checkpoints: {steps}"
        )
    source = ckpt.step_dir(run_dir, step)
    return source, ckpt.read_state(source)


def _write_merged(base: str, source: Path, full: bool, out: Path, dtype: str | None) -> None:
    try:
        import torch
        from transformers import AutoModelForCausalLM
    except ImportError as exc:
        raise MissingExtraError(exc.name or "torch", "local") from exc
    quiet_hf()
    try:
        model: Any = AutoModelForCausalLM.from_pretrained(
            resolve_base_model(base), dtype=torch.float32
        )
    except OSError as exc:
        raise InvalidInputError(
            f"cannot load the run's base model {base!r} ({one_line(exc)}); a relative path is "
            "read from the current directory, so export from where the run was trained"
        ) from None
    saved_dtype = dtype or _dtype_name(model.config) or "float32"
    if full:
        weights = checkpoint_io.load_weights(source / ckpt.WEIGHTS_FILE)
        try:  # the checkpoint holds every name, tied ones included (checkpoints.save_weights)
            model.load_state_dict(weights, strict=True)
        except RuntimeError as exc:
            raise CorruptDataError(f"the weights in {source} do not fit {base!r}: {exc}") from exc
    else:
        model = _merged_lora(model, source)
    model = model.to(getattr(torch, saved_dtype))
    model.save_pretrained(str(out), safe_serialization=True)
    generation = _base_file(base, GENERATION_CONFIG)
    if generation is not None:
        shutil.copyfile(generation, out / GENERATION_CONFIG)


def _merged_lora(model: Any, source: Path) -> Any:
    try:
        from peft import PeftModel
        from safetensors import safe_open
    except ImportError as exc:
        raise MissingExtraError(exc.name or "peft", "local") from exc
    with safe_open(str(source / ADAPTER_FILES[1]), "pt") as adapter:
        touched = {part for key in adapter.keys() for part in key.split(".")}  # noqa: SIM118
    if _is_tied(model) and touched & set(_EMBEDDING_MODULES):
        _untie(model)
    try:
        peft_model = PeftModel.from_pretrained(model, str(source))
    except Exception as exc:  # peft raises many kinds; all mean the adapter does not fit
        first = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
        raise CorruptDataError(
            f"cannot apply the LoRA adapter in {source}: {type(exc).__name__}: {first}"
        ) from None
    return peft_model.merge_and_unload()


def _is_tied(model: Any) -> bool:
    head = model.get_output_embeddings()
    embeddings = model.get_input_embeddings()
    return head is not None and head.weight is embeddings.weight


def _untie(model: Any) -> None:
    import torch

    head = model.get_output_embeddings()
    head.weight = torch.nn.Parameter(head.weight.detach().clone())
    model.config.tie_word_embeddings = False
    text_config = getattr(model.config, "get_text_config", None)
    if callable(text_config):
        text_config().tie_word_embeddings = False


def _dtype_name(config: Any) -> str | None:
    value = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    name = str(value).removeprefix("torch.") if value is not None else None
    return name if name in DTYPES else None


def _tokenizer_files(base: str) -> list[Path]:
    found = [path for name in TOKENIZER_FILES if (path := _base_file(base, name)) is not None]
    if not any(path.name in ("tokenizer.json", "tokenizer_config.json") for path in found):
        raise InvalidInputError(
            f"found no tokenizer files for the base model {base!r}; the export needs them "
            "(tokenizer.json or tokenizer_config.json)"
        )
    return found


def _base_file(base: str, name: str) -> Path | None:
    """A file of the base model: in its directory, or in the Hugging Face cache (downloaded
    when missing) for a hub id."""
    directory = Path(resolve_base_model(base))
    if directory.is_dir():
        path = directory / name
        return path if path.is_file() else None
    try:
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import EntryNotFoundError
    except ImportError as exc:
        raise MissingExtraError("huggingface_hub", "local") from exc
    try:
        return Path(hf_hub_download(base, name))
    except EntryNotFoundError:
        return None
    except Exception as exc:
        raise InvalidInputError(f"cannot fetch {name} of the base model {base!r}: {exc}") from exc
