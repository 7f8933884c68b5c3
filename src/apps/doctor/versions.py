"""Installed versions against the ranges arthex supports, and what torch sees of the GPUs.

The ranges come from arthex's own package metadata (the extras in pyproject.toml, as
installed): torch, transformers and peft from `local`, vLLM (and the torch it pins) from
`vllm`, tinker from `tinker`, wandb from `wandb`. A vLLM in range but not among the tested
releases (`vllm_args.TESTED_VLLM`, each with the torch it pins) is a warning.
"""

from __future__ import annotations

import importlib.metadata as metadata
import shutil
import subprocess
from collections.abc import Callable, Sequence
from typing import Literal

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from .check import Check, fail, ok, warn

Backend = Literal["local", "tinker", "serverless"]
BACKENDS: tuple[Backend, ...] = ("local", "tinker", "serverless")
# package -> the extra whose range applies to it
EXTRA_OF = {
    "torch": "local",
    "transformers": "local",
    "peft": "local",
    "vllm": "vllm",
    "tinker": "tinker",
    "wandb": "wandb",
}
_NEEDED: dict[Backend, tuple[str, ...]] = {
    "local": ("torch", "transformers", "peft"),
    "tinker": ("torch", "transformers", "peft", "tinker"),
    "serverless": (),
}

Installed = Callable[[str], str | None]


def installed_version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def supported(
    package: str, extras: Sequence[str], requirements: Sequence[str] | None = None
) -> SpecifierSet:
    """The range arthex's metadata gives `package` under `extras` (all of them at once)."""
    lines = requirements if requirements is not None else metadata.requires("arthex") or []
    found = SpecifierSet()
    for line in lines:
        requirement = Requirement(line)
        if requirement.name.lower() != package:
            continue
        marker = requirement.marker
        if marker is None or any(marker.evaluate({"extra": extra}) for extra in extras):
            found &= requirement.specifier
    return found


def check_versions(backend: Backend, version_of: Installed = installed_version) -> list[Check]:
    """One line per package: in range, out of range, or missing (a failure only when the
    backend needs it)."""
    vllm = version_of("vllm")
    checks = []
    for package, extra in EXTRA_OF.items():
        extras = [extra, "vllm"] if package == "torch" and vllm is not None else [extra]
        checks.append(_one(package, extras, version_of(package), backend))
    if vllm is not None:
        checks.append(_tested_vllm(vllm, version_of("torch")))
    return checks


def _one(package: str, extras: list[str], found: str | None, backend: Backend) -> Check:
    wanted = supported(package, extras)
    needed = package in _NEEDED[backend]
    install = f"pip install 'arthex[{extras[-1]}]'"
    if found is None:
        if needed:
            return fail(package, f"not installed; the {backend} backend needs it", install)
        return ok(package, f"not installed ({_why_optional(package)})")
    try:
        in_range = wanted.contains(Version(found), prereleases=True)
    except InvalidVersion:
        return warn(package, f"{found} is not a version arthex can compare", install)
    if in_range:
        return ok(package, f"{found} (supported: {wanted or 'any'})")
    verdict = fail if needed else warn
    return verdict(package, f"{found} is outside the supported range {wanted}", install)


def _why_optional(package: str) -> str:
    return {
        "vllm": "the torch engine samples; vLLM serves faster on a GPU: pip install 'arthex[vllm]'",
        "tinker": "only --backend tinker needs it",
        "wandb": "only report_metrics=['wandb'] needs it",
    }.get(package, "not needed by this backend")


def _tested_vllm(vllm: str, torch: str | None) -> Check:
    from ...adapters.inference.vllm_args import TESTED_VLLM

    pinned = TESTED_VLLM.get(vllm)
    if pinned is None:
        return warn(
            "vllm tested",
            f"vLLM {vllm} is not a tested release ({', '.join(TESTED_VLLM)})",
            f"pip install 'vllm=={list(TESTED_VLLM)[-1]}'",
        )
    if torch is None or Version(torch).base_version != pinned:
        return fail(
            "vllm tested",
            f"vLLM {vllm} pins torch {pinned}, but torch {torch} is installed",
            f"pip install 'torch=={pinned}'",
        )
    return ok("vllm tested", f"vLLM {vllm} with the torch it pins ({pinned})")


def check_gpu(cpu_chosen: bool = False) -> Check:
    """What torch sees: the GPUs with their memory, CUDA and the driver, or that it sees none
    (a warning for a CUDA build, unless the CPU was chosen with --device cpu)."""
    try:
        import torch
    except ImportError:
        return ok("gpu", "torch is not installed: nothing here trains or samples")
    built = torch.version.cuda
    if not torch.cuda.is_available():
        if built is None:
            return ok(
                "gpu", f"none: torch {torch.__version__} is a CPU build; training runs on the CPU"
            )
        if cpu_chosen:
            return ok("gpu", f"none visible to torch (built for CUDA {built}); --device cpu")
        return warn(
            "gpu",
            f"torch is built for CUDA {built} but sees no GPU",
            "check the driver (nvidia-smi) and CUDA_VISIBLE_DEVICES, or pass --device cpu to "
            "plan for the CPU",
        )
    devices = []
    for index in range(torch.cuda.device_count()):
        free, total = torch.cuda.mem_get_info(index)
        name = torch.cuda.get_device_name(index)
        devices.append(f"cuda:{index} {name} ({free / 2**30:.1f} of {total / 2**30:.1f} GiB free)")
    driver = _driver_version()
    return ok(
        "gpu",
        f"CUDA {built}, driver {driver or 'unknown'}: {'; '.join(devices)}",
    )


def _driver_version() -> str | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        found = subprocess.run(
            [smi, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    lines = found.stdout.split()
    return lines[0] if found.returncode == 0 and lines else None
