"""Environments someone else wrote, in arthex's terms: `Environment` (the protocol:
`scenarios(split)` and `async rollout(model, scenario) -> Trajectory`) and adapters for the
published environment packages.

- `from_verifiers(env, *, eval_env=None, **sampling)`: a verifiers (0.4, `verifiers.v1`)
  environment's own episodes and scoring, trained on the exact sampled tokens.
- `from_openenv(env, *, scenarios, prompt, action, ...)`: an OpenEnv environment (in-process,
  or a server reached with an OpenEnv client) played by the model.
- `as_environment(value)`: an arthex Environment as is, a verifiers environment wrapped.
- `rollout_fn(environment, n)`: a PipelineTrainer rollout_fn with `n` rollouts per group.

Neither verifiers nor openenv is imported by `import arthex` (or by importing this package):
an adapter imports its package when it is built, and says which extra to install (`envs`)
when it is missing. See docs/environments.md.
"""

from ..core.environments import Environment
from .entry import as_environment, rollout_fn
from .openenv_adapter import OpenEnvEnvironment, from_openenv
from .shared import EpisodeError
from .verifiers_adapter import VerifiersEnvironment, from_verifiers

__all__ = [
    "Environment",
    "EpisodeError",
    "OpenEnvEnvironment",
    "VerifiersEnvironment",
    "as_environment",
    "from_openenv",
    "from_verifiers",
    "rollout_fn",
]
