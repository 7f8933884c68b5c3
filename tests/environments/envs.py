"""Building the tests' verifiers environments: the taskset by id, the in-process harness its
module exports, verifiers' subprocess runtime (nothing remote, nothing downloaded)."""

from __future__ import annotations

from typing import Any

import verifiers.v1 as vf

SINGLE_TURN = "arthex_vf_arith"
MULTI_TURN = "arthex_vf_dialogue"


def load(taskset: str) -> Any:
    config = vf.SingleAgentEnvConfig(
        taskset=vf.TasksetConfig(id=taskset), agent=vf.AgentConfig(runtime=vf.SubprocessConfig())
    )
    return vf.load_environment(config)


def arith() -> Any:
    """`arthex eval --env tests.environments.envs:arith`: the single-turn verifiers
    environment, which the command adapts itself."""
    return load(SINGLE_TURN)
