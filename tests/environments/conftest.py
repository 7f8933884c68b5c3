"""The environments suite needs verifiers and openenv, which live in a venv of their own
(envs_venv.py): where they are importable its tests run; elsewhere (the main venv) only
test_in_envs_venv.py is collected, which builds that venv and runs them there.

verifiers loads tasksets and harnesses by a top-level module name, so `plugins/` is put on
`sys.path` here.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).parent
HAS_EXTRAS = all(importlib.util.find_spec(name) for name in ("verifiers", "openenv", "datasets"))

if HAS_EXTRAS:
    collect_ignore = ["test_in_envs_venv.py"]
    if str(HERE / "plugins") not in sys.path:
        sys.path.insert(0, str(HERE / "plugins"))
else:
    collect_ignore = [
        str(path.relative_to(HERE))
        for path in [*HERE.glob("*.py"), HERE / "plugins"]
        if path.name not in {"test_in_envs_venv.py", "conftest.py", "__init__.py", "envs_venv.py"}
    ]
