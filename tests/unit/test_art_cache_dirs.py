"""ART's cache folders (`arthex.art.utils.cache_dirs`) on worked examples; ART's own answers on
more cases are compared in tests/interop/test_art_templates_and_caches.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from arthex.art.utils.cache_dirs import (
    cache_filesystem_type,
    compiler_cache_root,
    configure_model_cache_env,
    network_cache_warning,
)
from arthex.utils import cache_dirs


def test_an_empty_environment_gets_every_cache_under_tmp_art_cache() -> None:
    env: dict[str, str] = {}
    assert configure_model_cache_env(env) == Path("/tmp/art-cache")
    assert env == {
        "XDG_CACHE_HOME": "/tmp/art-cache",
        "HF_HOME": "/tmp/art-cache/huggingface",
        "HF_HUB_CACHE": "/tmp/art-cache/huggingface/hub",
        "HUGGINGFACE_HUB_CACHE": "/tmp/art-cache/huggingface/hub",
        "TRANSFORMERS_CACHE": "/tmp/art-cache/huggingface/hub",
        "TORCH_HOME": "/tmp/art-cache/torch",
        "TORCH_EXTENSIONS_DIR": "/tmp/art-cache/compiled/unknown/torch_extensions",
        "TORCHINDUCTOR_CACHE_DIR": "/tmp/art-cache/compiled/unknown/torchinductor",
        "TRITON_HOME": "/tmp/art-cache",
        "TRITON_CACHE_DIR": "/tmp/art-cache/compiled/unknown/triton",
        "VLLM_CACHE_ROOT": "/tmp/art-cache/compiled/unknown/vllm",
        "VLLM_CONFIG_ROOT": "/tmp/art-cache/vllm_config",
    }


def test_moving_the_root_moves_its_defaults_and_keeps_paths_set_by_hand() -> None:
    env = {"TRITON_CACHE_DIR": "/fast/triton", "TORCH_CUDA_ARCH_LIST": "8.0 9.0+PTX"}
    configure_model_cache_env(env)
    assert env["TORCH_HOME"] == "/tmp/art-cache/torch"
    assert configure_model_cache_env(env, cache_root="/nvme/c") == Path("/nvme/c")
    assert env["ART_MEGATRON_CACHE_ROOT"] == "/nvme/c"
    assert env["HF_HUB_CACHE"] == "/nvme/c/huggingface/hub"
    assert env["TORCH_HOME"] == "/nvme/c/torch"
    assert env["VLLM_CACHE_ROOT"] == "/nvme/c/compiled/8.0_9.0_PTX/vllm"
    assert env["TRITON_CACHE_DIR"] == "/fast/triton"  # set by hand: kept


def test_the_process_environment_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [*os.environ]:
        if name.endswith(("_CACHE", "_HOME", "_DIR", "_ROOT", "ARCH_LIST")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("ART_MEGATRON_CACHE_ROOT", "~/c")
    before = dict(os.environ)
    try:
        assert configure_model_cache_env() == Path("~/c").expanduser()
        assert os.environ["HF_HOME"] == str(Path("~/c/huggingface").expanduser())
    finally:  # what it set must not reach later tests (or the processes they start)
        os.environ.clear()
        os.environ.update(before)
    assert compiler_cache_root("/r") == Path("/r/compiled/unknown")
    assert compiler_cache_root("/r", {"CUDA_ARCH_LIST": "sm_90a;sm_100"}) == Path(
        "/r/compiled/sm_90a_sm_100"
    )


def test_the_filesystem_is_the_deepest_mount_holding_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mounts = tmp_path / "mounts"
    mounts.write_text(
        "/dev/sda1 / ext4 rw 0 0\n"
        "server:/export /mnt/shared nfs4 rw 0 0\n"
        "tmpfs /mnt/shared/my\\040scratch tmpfs rw 0 0\n"
        "short line\n"
    )
    monkeypatch.setattr(cache_dirs, "_MOUNTS", mounts)
    assert cache_filesystem_type("/mnt/shared/models") == "nfs4"
    assert cache_filesystem_type("/mnt/shared/my scratch/x") == "tmpfs"
    assert cache_filesystem_type("/mnt/sharedother") == "ext4"
    assert network_cache_warning("/mnt/shared/hf") == (
        "/mnt/shared/hf is on nfs4, a network filesystem: keep runtime installs and compiler "
        "caches on a fast disk of this machine"
    )
    assert network_cache_warning("/mnt/shared/my scratch") is None
    monkeypatch.setattr(cache_dirs, "_MOUNTS", tmp_path / "none")
    assert cache_filesystem_type("/") is None and network_cache_warning("/") is None
