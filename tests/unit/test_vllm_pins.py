"""The vLLM pins agree with each other: the `vllm` extra admits exactly the tested releases'
range and the torch they pin, the Makefile's vLLM venv installs a tested pair, and the vLLM
API suite (tests/vllm_api) tests a tested release. vLLM pins torch exactly in its wheel
metadata (0.26.0: `torch==2.11.0`, 0.33.0: `torch==2.14.0`), so a pair that does not match
cannot be installed at all."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

from arthex.adapters.inference.vllm_args import TESTED_VLLM

from ..vllm_api.vllm_env import DEFAULT_VERSION

ROOT = Path(__file__).resolve().parents[2]
# What vLLM's wheels require (their METADATA's `Requires-Dist: torch==...`), read by hand.
WHEEL_TORCH = {"0.26.0": "2.11.0", "0.33.0": "2.14.0"}


def _extra(name: str) -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = [Requirement(r) for r in project["optional-dependencies"][name]]
    return {r.name: r for r in requirements}


def _make_variable(name: str) -> str:
    found = re.search(rf"^{name} \?= (.+)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert found, f"the Makefile sets no {name}"
    return found.group(1).strip()


def test_the_tested_releases_pin_the_torch_their_wheels_require() -> None:
    assert dict(TESTED_VLLM) == WHEEL_TORCH


def test_the_vllm_extra_admits_the_tested_releases_and_their_torch_only() -> None:
    extra = _extra("vllm")
    vllm, torch = extra["vllm"].specifier, extra["torch"].specifier
    for release, torch_version in TESTED_VLLM.items():
        assert vllm.contains(release), release
        assert torch.contains(torch_version), torch_version
    newest = max(Version(v) for v in TESTED_VLLM)
    oldest = min(Version(v) for v in TESTED_VLLM)
    assert not vllm.contains(f"{newest.major}.{newest.minor}.{newest.micro + 1}")
    assert not vllm.contains(f"{oldest.major}.{oldest.minor - 1}.0")
    assert not torch.contains("2.15.0") and not torch.contains("2.10.0")


def test_the_makefile_vllm_venv_installs_a_tested_pair_inside_the_extra() -> None:
    vllm = Requirement(_make_variable("VLLM_SPEC"))
    torch = Requirement(_make_variable("VLLM_TORCH_SPEC"))
    (pinned_vllm,) = (spec.version for spec in vllm.specifier)
    (pinned_torch,) = (spec.version for spec in torch.specifier)
    assert TESTED_VLLM[pinned_vllm] == pinned_torch
    extra = _extra("vllm")
    assert extra["vllm"].specifier.contains(pinned_vllm)
    assert extra["torch"].specifier.contains(pinned_torch)


def test_the_vllm_api_suite_tests_a_tested_release() -> None:
    assert DEFAULT_VERSION in TESTED_VLLM
    assert max(TESTED_VLLM, key=Version) == DEFAULT_VERSION  # the newest by default
