"""ART's cache folders (`art.utils.cache_dirs`): where model downloads and compiler caches go,
and whether a folder sits on a network filesystem.

`configure_model_cache_env` sets the variables Hugging Face, torch, Triton and vLLM read
(`XDG_CACHE_HOME`, `HF_HOME`, `HF_HUB_CACHE`, `TORCH_HOME`, `TRITON_CACHE_DIR`,
`VLLM_CACHE_ROOT`, ...) as ART 0.5.23 sets them: a path already set is kept, except that when
`cache_root=` moves the root, a path that was the old root's default moves with it. Compiled
kernels go under `{root}/compiled/{CUDA arch list}` so machines with different GPUs sharing a
root do not load each other's. arthex's backends do not call it (they use the libraries'
own defaults); a script that wants ART's node-local layout calls it before loading a model.
Stdlib only; nothing is created on disk.
"""

from __future__ import annotations

import os
import re
from collections.abc import MutableMapping
from pathlib import Path

__all__ = [
    "cache_filesystem_type",
    "compiler_cache_root",
    "configure_model_cache_env",
    "network_cache_warning",
]

DEFAULT_CACHE_ROOT = Path("/tmp/art-cache")
ROOT_VARIABLE = "ART_MEGATRON_CACHE_ROOT"  # ART's name for the root, kept so both agree
NETWORK_FILESYSTEMS = frozenset(
    {"ceph", "cifs", "fuse.sshfs", "gpfs", "lustre", "nfs", "nfs4", "smb3", "weka"}
)
_MOUNTS = Path("/proc/mounts")


def compiler_cache_root(
    cache_root: str | Path, environ: MutableMapping[str, str] | None = None
) -> Path:
    """`{cache_root}/compiled/{arch}`: the GPU architectures of `TORCH_CUDA_ARCH_LIST` (else
    `CUDA_ARCH_LIST`, else "unknown"), with every run of other characters made one `_`."""
    env = os.environ if environ is None else environ
    arch = env.get("TORCH_CUDA_ARCH_LIST") or env.get("CUDA_ARCH_LIST") or "unknown"
    return Path(cache_root) / "compiled" / re.sub(r"[^A-Za-z0-9._-]+", "_", arch)


def _unescape(field: str) -> str:
    # /proc/mounts writes a space in a mount point as \040 and a backslash as \134
    return field.replace(r"\040", " ").replace(r"\134", "\\")


def cache_filesystem_type(path: str | Path) -> str | None:
    """The type (`ext4`, `nfs4`, ...) of the Linux mount holding `path`, the deepest mount
    that contains it; None when /proc/mounts cannot be read or no mount contains it."""
    target = Path(path).expanduser().resolve()
    try:
        lines = _MOUNTS.read_text().splitlines()
    except OSError:
        return None
    best: tuple[int, str] | None = None
    for line in lines:
        fields = line.split()
        if len(fields) < 3:
            continue
        mount = Path(_unescape(fields[1]))
        if not target.is_relative_to(mount):
            continue
        depth = len(mount.parts)
        if best is None or depth > best[0]:
            best = (depth, fields[2])
    return None if best is None else best[1]


def network_cache_warning(path: str | Path) -> str | None:
    """A one-line warning when `path` is on a network filesystem, else None."""
    filesystem = cache_filesystem_type(path)
    if filesystem not in NETWORK_FILESYSTEMS:
        return None
    return (
        f"{Path(path).expanduser()} is on {filesystem}, a network filesystem: keep runtime "
        "installs and compiler caches on a fast disk of this machine"
    )


def _set(
    environ: MutableMapping[str, str],
    name: str,
    default: str | Path,
    old_default: Path | None = None,
) -> Path:
    """Keep `name`'s path unless it is unset or was the old root's default; write it back."""
    path = Path(environ.get(name) or default).expanduser()
    if old_default is not None and path == old_default:
        path = Path(default).expanduser()
    environ[name] = str(path)
    return path


def configure_model_cache_env(
    environ: MutableMapping[str, str] | None = None, *, cache_root: str | Path | None = None
) -> Path:
    """Fill in the cache variables of `environ` (default: this process's) under one root:
    `cache_root`, else `$ART_MEGATRON_CACHE_ROOT`, else `$XDG_CACHE_HOME`, else
    /tmp/art-cache. Returns the root (the named one when there is one)."""
    env = os.environ if environ is None else environ
    # the defaults as they stood before this call, to move along when cache_root= moves the root
    named_before = env.get(ROOT_VARIABLE)
    root_before = Path(named_before).expanduser() if named_before else DEFAULT_CACHE_ROOT
    xdg_before = Path(env.get("XDG_CACHE_HOME") or root_before).expanduser()
    hf_before = Path(env.get("HF_HOME") or xdg_before / "huggingface").expanduser()
    hub_before = Path(
        env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE") or hf_before / "hub"
    ).expanduser()

    chosen = cache_root if cache_root is not None else named_before
    named = Path(chosen).expanduser() if chosen is not None else None
    if named is not None:
        env[ROOT_VARIABLE] = str(named)
    moving = cache_root is not None

    def old(path: Path) -> Path | None:
        return path if moving else None

    xdg = _set(env, "XDG_CACHE_HOME", named or DEFAULT_CACHE_ROOT, old(root_before))
    hf_home = _set(env, "HF_HOME", xdg / "huggingface", old(xdg_before / "huggingface"))
    legacy = env.get("HUGGINGFACE_HUB_CACHE")
    keep_legacy = legacy and (not moving or Path(legacy).expanduser() != hf_before / "hub")
    hub = _set(
        env,
        "HF_HUB_CACHE",
        Path(legacy).expanduser() if legacy and keep_legacy else hf_home / "hub",
        old(hf_before / "hub"),
    )
    compiled = compiler_cache_root(xdg, env)
    compiled_before = compiler_cache_root(xdg_before, env)
    for name, default, previous in (
        ("HUGGINGFACE_HUB_CACHE", hub, hf_before / "hub"),
        ("TRANSFORMERS_CACHE", hub, hub_before),
        ("TORCH_HOME", xdg / "torch", xdg_before / "torch"),
        (
            "TORCH_EXTENSIONS_DIR",
            compiled / "torch_extensions",
            compiled_before / "torch_extensions",
        ),
        ("TORCHINDUCTOR_CACHE_DIR", compiled / "torchinductor", compiled_before / "torchinductor"),
        ("TRITON_HOME", xdg, xdg_before),
        ("TRITON_CACHE_DIR", compiled / "triton", compiled_before / "triton"),
        ("VLLM_CACHE_ROOT", compiled / "vllm", compiled_before / "vllm"),
        ("VLLM_CONFIG_ROOT", xdg / "vllm_config", xdg_before / "vllm_config"),
    ):
        _set(env, name, default, old(previous))
    return named or xdg
