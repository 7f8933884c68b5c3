"""`arthex doctor`'s memory plan against hand-worked numbers.

The oracles: the published parameter counts of Llama-3.1-8B (8,030,261,248) and
Qwen2.5-0.5B (494,032,768), the well-known 20,971,520 trainable parameters of a rank-8 LoRA
on every linear layer of a Llama-3-8B, torch's own count of the tiny model's parameters, and
the formulas of docs/troubleshooting.md worked by hand below, step by step.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from arthex.apps.doctor.memory import (
    LORA_TARGETS,
    ModelShape,
    PlanSettings,
    check_memory,
    parse_size,
    plan,
    read_shape,
)
from arthex.core.errors import InvalidInputError

GiB = 2**30
MiB = 2**20

LLAMA_8B = {
    "model_type": "llama",
    "vocab_size": 128256,
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "max_position_embeddings": 131072,
    "tie_word_embeddings": False,
}
QWEN_7B = {
    "model_type": "qwen2",
    "vocab_size": 152064,
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "num_hidden_layers": 28,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "max_position_embeddings": 32768,
    "tie_word_embeddings": False,
}
QWEN_05B = {
    "model_type": "qwen2",
    "vocab_size": 151936,
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "max_position_embeddings": 32768,
    "tie_word_embeddings": True,
}


def shape_of(tmp_path: Path, config: dict[str, object]) -> ModelShape:
    folder = tmp_path / str(config["model_type"])
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return read_shape(folder)


def test_parameter_counts_match_the_published_ones(tmp_path: Path) -> None:
    llama = shape_of(tmp_path, LLAMA_8B)
    assert llama.params == 8_030_261_248
    assert llama.lora_params(8) == 20_971_520
    assert shape_of(tmp_path, QWEN_05B).params == 494_032_768


def test_the_tiny_model_counts_what_torch_counts(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from transformers import AutoModelForCausalLM

    from arthex.testing.tiny_model import tiny_model

    folder = tiny_model(tmp_path / "tiny")
    model = AutoModelForCausalLM.from_pretrained(folder)
    assert read_shape(Path(folder)).params == sum(p.numel() for p in model.parameters())
    from peft import LoraConfig, get_peft_model

    lora = get_peft_model(model, LoraConfig(r=8, target_modules=list(LORA_TARGETS)))
    trainable = sum(p.numel() for p in lora.parameters() if p.requires_grad)
    assert read_shape(Path(folder)).lora_params(8) == trainable


def test_the_trainer_constants_are_the_trainers() -> None:
    pytest.importorskip("torch")
    from arthex.adapters.local import layers
    from arthex.adapters.local.trainer import (
        DEFAULT_LORA_TARGETS,
        FULL_FINETUNE_BELOW_PARAMS,
        TrainerSettings,
    )
    from arthex.apps.doctor import memory

    assert memory.LORA_TARGETS == DEFAULT_LORA_TARGETS
    assert memory.FULL_FINETUNE_BELOW_PARAMS == FULL_FINETUNE_BELOW_PARAMS
    assert TrainerSettings(base_model="x").micro_batch_tokens == memory.MICRO_BATCH_TOKENS
    assert layers.MLP_CHUNK_TOKENS == memory.MLP_CHUNK_TOKENS
    assert layers.AUTO_ABOVE_BYTES == memory.CHECKPOINT_ABOVE_BYTES


def test_qwen_half_b_lora_on_a_24_gib_gpu_worked_by_hand(tmp_path: Path) -> None:
    """The first example of docs/troubleshooting.md: it fits."""
    shape = shape_of(tmp_path, QWEN_05B)
    settings = PlanSettings(max_seq_len=2048, batch=16, gpu=True, engine="vllm")
    found = plan(shape, settings, 24 * GiB, 24 * GiB)
    # weights: 494,032,768 params in bfloat16
    assert found.part("weights") == 988_065_536
    # LoRA r=8, per layer (q 896+896, k 896+128, v 896+128, o 896+896, gate/up/down 896+4864
    # each) = 22,912 x 8 x 24 layers = 4,399,104 params; x16 bytes
    assert found.part("LoRA+AdamW") == 70_385_664
    # rows of 2048: min(16, 8192 // 2048) = 4 rows = 8192 tokens. Unchecked, a layer keeps
    # (4*896 + 3*(14+2)*64 + 4*4864) = 26,112 values x 2 B a token: 24 x 8192 x 52,224 B =
    # 10.3 GB > 1 GiB, so the layers are checkpointed: every token keeps 24 x 896 x 2 B =
    # 43,008 B of layer inputs and the rebuilt layer's attention part, (4*896 + 3*16*64) x 2
    # = 13,312 B + peft's float32 inputs to q/k/v and o 4*(896 + 896) = 7,168 B: 63,488 B;
    # 1024 tokens (one MLP chunk) keep its MLP part, 4*4864 x 2 = 38,912 B + peft's float32
    # inputs to gate/up and down 4*(896 + 4864) = 23,040 B: 61,952 B. Backward's peak is the
    # larger moment of the rebuilt layer: its MLP's, the chunk and its gradients (3*4864 +
    # 896) x 2 = 30,976 B a chunk token, and the layer output's gradient 896 x 2 = 1,792 B a
    # token: 1024 x 92,928 + 8192 x 1,792 = 109,838,336 B; or its attention part's, whose
    # gradients are 8192 x 13,312 = 109,051,904 B (the MLP chunk freed by then)
    assert found.micro_tokens == 8192 and found.checkpointed
    mlp_moment = 1024 * (61_952 + 30_976) + 8192 * 1_792
    assert mlp_moment == 109_838_336 > 8192 * 13_312
    assert found.part("activations") == 8192 * 63_488 + mlp_moment == 629_932_032
    # one chunk: 256 positions x 151,936 x (2 + 4 + 4) B
    assert found.part("log-prob chunk") == 388_956_160
    assert found.part("vLLM") == 12_884_901_888  # 0.5 of 24 GiB
    assert found.part("CUDA") == GiB
    assert found.needed == 16_035_983_104 and found.fits  # 14.93 GiB


def test_qwen_7b_on_8k_rows_on_an_80_gib_gpu_worked_by_hand(tmp_path: Path) -> None:
    """The second example of docs/troubleshooting.md: it fits."""
    shape = shape_of(tmp_path, QWEN_7B)
    assert shape.params == 7_615_616_512  # the published count
    settings = PlanSettings(max_seq_len=8192, batch=16, gpu=True, engine="vllm")
    found = plan(shape, settings, 80 * GiB, 80 * GiB)
    assert found.part("weights") == 15_231_233_024
    # LoRA r=8 per layer: q 7,168, k 4,096, v 4,096, o 7,168, gate/up/down 22,528 each:
    # 90,112 x 8 x 28 = 20,185,088 params, x16 bytes
    assert found.part("LoRA+AdamW") == 322_961_408
    # one row of 8192 tokens, checkpointed: a token keeps 28 x 3584 x 2 = 200,704 B of
    # inputs and the rebuilt layer's attention part (4*3584 + 3*32*128) x 2 = 53,248 B +
    # 4*(3584 + 3584) = 28,672 B: 282,624 B; 1024 tokens its MLP part 4*18944 x 2 = 151,552 B
    # + 4*(3584 + 18944) = 90,112 B: 241,664 B. Backward's peak: the attention part's
    # moment, its gradients 8192 x 53,248 = 436,207,616 B, passes the MLP's, 1024 x (241,664
    # + (3*18944 + 3584) x 2) + 8192 x 3584 x 2 = 429,916,160 B
    assert found.checkpointed and found.micro_tokens == 8192
    mlp_moment = 1024 * (241_664 + 120_832) + 8192 * 7_168
    assert mlp_moment == 429_916_160 < 8192 * 53_248
    assert found.part("activations") == 8192 * (282_624 + 53_248) == 2_751_463_424
    assert found.part("log-prob chunk") == 256 * 152_064 * 10
    assert found.needed == 62_718_356_480 and found.fits  # 58.41 GiB of 80


def test_a_plan_that_does_not_fit_names_the_knob_that_makes_it_fit(tmp_path: Path) -> None:
    shape = shape_of(tmp_path, QWEN_05B)
    # rows of 128: 16 rows = 2048 tokens, checkpointed (24 x 2048 x 52,224 B > 1 GiB):
    # 2048 x 63,488 + 1024 x (61,952 + 30,976) + 2048 x 1,792 = 228,851,712 (as worked
    # above, the MLP's moment the larger); chunk 388,956,160; + weights 988,065,536 + LoRA
    # 70,385,664 + CUDA 1 GiB = 2,750,000,896 besides vLLM; vLLM at 0.9 of 24 GiB =
    # 23,192,823,398: 25,942,824,294 (24.16 GiB). vLLM may keep (25,769,803,776 -
    # 2,750,000,896) / 25,769,803,776 = 0.893...: 0.89. No smaller micro-batch fits: at 1024
    # tokens 24.10 GiB, and at 512 or fewer the layers are no longer
    # checkpointed ("auto"), which costs more than the tokens save.
    settings = PlanSettings(max_seq_len=128, gpu=True, engine="vllm", gpu_memory_utilization=0.9)
    check = check_memory(shape, settings, 24 * GiB, 24 * GiB, "stated")
    assert check.status == "fail" and "needs 24.16 GiB" in check.message
    assert check.fix == "lower gpu_memory_utilization from 0.9 to 0.89"


def test_the_micro_batch_is_the_first_lever(tmp_path: Path) -> None:
    shape = shape_of(tmp_path, QWEN_05B)
    # unchecked, rows of 512: 16 rows = 8192 tokens x (24 x 82,432 + 13,312) B = 15.20 GiB of
    # activations, beside weights 0.92, LoRA 0.07, chunk 0.36, vLLM 12 and CUDA 1 GiB: 29.54
    # GiB. 4096 tokens keep half (7.60 GiB: 21.94 GiB), and checkpointing the layers fits too
    settings = PlanSettings(max_seq_len=512, gpu=True, engine="vllm", gradient_checkpointing=False)
    check = check_memory(shape, settings, 24 * GiB, 24 * GiB, "stated")
    assert check.status == "fail"
    levers = check.fix.split("; or ")
    assert levers[0].startswith("a smaller micro-batch (LocalBackend(micro_batch_tokens=4096)")
    assert levers[1].startswith("activation checkpointing (LocalBackend(gradient_checkpointing")


def test_lora_is_the_knob_when_full_fine_tuning_does_not_fit(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from arthex.testing.tiny_model import tiny_model

    shape = read_shape(Path(tiny_model(tmp_path / "tiny")))
    # P = 637*64 + 2*(2*64*4*16 + 2*64*2*16 + 3*64*128 + 2*64) + 64 = 114,816 (torch agrees)
    # rows of 128 on the CPU, 16 rows = 2048 tokens; a token keeps (float32, unchecked: 2 x
    # 2048 x 1,056 x 4 B is far below 1 GiB) 2 layers x (4*64 + 3*(4+2)*16 + 4*128) x 4 B =
    # 8,448 B, and one layer's gradients (4*64 + 3*6*16) x 4 = 2,176 B: 2048 x 10,624 =
    # 21,757,952; one log-prob chunk 256 x 637 x (4 + 8) B = 1,956,864.
    # KV cache 16 x 128 x 2*2*2*16 x 4 B = 1,048,576.
    # full: 4P + 12P + acts + chunk + 2 engine copies 8P + cache = 27,518,976 (26.24 MiB)
    # LoRA: 4P + 16 x 16,384 + acts + chunk + 4P + cache = 25,944,064 (24.74 MiB)
    # micro-batches of 1024 tokens (8 rows) keep half the activations: 10,878,976, and full
    # fine-tuning needs 16,640,000 (15.87 MiB); with checkpointed layers a token keeps 2 x 64
    # x 4 B of inputs plus the rebuilt layer's attention part 2,176 B, and backward's peak
    # adds either the MLP's moment, 1024 tokens of its part 4*128 x 4 = 2,048 B and their
    # gradients (3*128 + 64) x 4 = 1,792 B plus the layer output's gradient 2048 x 64 x 4
    # (4,456,448), or the attention part's gradients 2048 x 2,176 (4,456,448 too): 2048 x
    # 2,688 + 4,456,448 = 9,961,472, and full fine-tuning needs 15,722,496 (14.99 MiB)
    memory = 25 * MiB
    settings = PlanSettings(max_seq_len=128, mode="full")
    full = plan(shape, settings, memory, memory)
    assert full.needed == 27_518_976 and full.full and not full.fits and not full.checkpointed
    check = check_memory(shape, settings, memory, memory, "stated")
    assert check.fix.split("; or ") == [
        "a smaller micro-batch (LocalBackend(micro_batch_tokens=1024), from 8192: the same "
        "gradient, more passes)",
        "activation checkpointing (LocalBackend(gradient_checkpointing=True): 15.0 MiB, "
        "about a third more compute)",
        "LoRA instead of full fine-tuning (full_finetune=False: 24.7 MiB)",
    ]
    auto = plan(shape, PlanSettings(max_seq_len=128), memory, memory)
    assert auto.full, "below 50M parameters the backend fine-tunes fully"


def test_nothing_but_a_smaller_model_fits(tmp_path: Path) -> None:
    shape = shape_of(tmp_path, LLAMA_8B)
    settings = PlanSettings(max_seq_len=4096, gpu=True, engine="vllm")
    check = check_memory(shape, settings, 24 * GiB, 24 * GiB, "stated")
    assert check.status == "fail"
    assert check.fix.startswith("a smaller base model (this one has 8.03B parameters)")
    vllm_full = PlanSettings(mode="full", gpu=True, engine="vllm")
    refused_full = check_memory(shape, vllm_full, 80 * GiB, 80 * GiB, "stated")
    assert refused_full.status == "fail" and "serves LoRA steps only" in refused_full.message
    longer = PlanSettings(max_seq_len=200_000)
    refused = check_memory(shape, longer, 24 * GiB, 24 * GiB, "stated")
    assert refused.status == "fail" and "context of 131072 tokens" in refused.message


@pytest.mark.parametrize(
    ("text", "size"),
    [("24GiB", 24 * GiB), ("80 GB", 80 * 10**9), ("512mib", 512 * MiB), ("1000", 1000)],
)
def test_sizes(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "lots", "-1GiB", "0", "24 parsecs"])
def test_bad_sizes_are_refused_in_one_line(text: str) -> None:
    with pytest.raises(InvalidInputError, match="--device-memory must be a size"):
        parse_size(text)


@pytest.fixture(scope="module")
def model_3m(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch")
    from arthex.testing.tiny_model import tiny_model

    return Path(tiny_model(tmp_path_factory.mktemp("3m") / "model", size="3M"))


@pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing:FutureWarning")
@pytest.mark.parametrize(
    ("dtype", "lora"), [("float32", False), ("float32", True), ("bfloat16", True)]
)
def test_activation_bytes_match_what_torch_saves_for_backward(
    model_3m: Path, dtype: str, lora: bool
) -> None:
    """The oracle: torch's own saved-tensor hooks, summing the distinct storages (parameters
    aside) the forward pass and the trainer's chunked log-probs keep for backward (layers
    unchecked; every position scored, as a completion-only row is)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from arthex.adapters.local.logprobs import selected_logprobs
    from arthex.apps.doctor.memory import activation_bytes

    model: Any = AutoModelForCausalLM.from_pretrained(str(model_3m), dtype=getattr(torch, dtype))
    if lora:  # as the trainer wraps it
        config = LoraConfig(
            r=8, lora_alpha=16, target_modules=list(LORA_TARGETS), lora_dropout=0.0, bias="none"
        )
        model = get_peft_model(model, config)
    model.eval()
    shape = read_shape(model_3m)
    rows, seq_len = 2, 256
    tokens = torch.randint(
        0, shape.vocab, (rows, seq_len), generator=torch.Generator().manual_seed(0)
    )
    storages: dict[int, int] = {}

    def keep(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        storages[storage.data_ptr()] = max(storages.get(storage.data_ptr(), 0), storage.nbytes())
        return tensor

    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    with torch.autograd.graph.saved_tensors_hooks(keep, lambda tensor: tensor):
        select = torch.ones((rows, seq_len - 1), dtype=torch.bool)
        selected_logprobs(model, select, 64, input_ids=tokens)
    measured = sum(size for pointer, size in storages.items() if pointer not in weights)
    b = 2 if dtype == "bfloat16" else 4
    planned = activation_bytes(shape, b, lora=lora, tokens=rows * seq_len)
    assert 0.85 <= measured / planned <= 1.15, (measured, planned, measured / planned)
