"""A training server's state directory, read as the runs its tenants named.

The server keeps each model under an opaque id (`backend/{tenant}/models/{id}`); its
`registry.json` says which `project/name` each id is. The commands that list or pick runs read
that file (never writing anything) so `arthex runs --base-path STATE` shows `project/name`, and
`arthex export project/name --base-path STATE` finds the folder.
"""

from __future__ import annotations

import json
from pathlib import Path

from ...adapters.layout import RunLayout
from ...core.errors import CorruptDataError, InvalidInputError
from ...core.identity import RunRef

REGISTRY = "registry.json"
BACKEND = "backend"


def server_runs(base: Path) -> tuple[Path, dict[Path, str]] | None:
    """(the folder the server's runs are under, run folder -> `project/name`) when `base` is a
    server's state directory or its `backend` folder; None otherwise."""
    if (base / REGISTRY).is_file():
        root, registry = base / BACKEND, base / REGISTRY
    elif base.name == BACKEND and (base.parent / REGISTRY).is_file():
        root, registry = base, base.parent / REGISTRY
    else:
        return None
    try:
        models = json.loads(registry.read_bytes())["models"]
        labels = {
            RunLayout.of(root, RunRef(project=m["tenant"], name=m["id"])).dir: (
                f"{m['project']}/{m['name']}"
            )
            for m in models
        }
    except (OSError, ValueError, KeyError, TypeError, InvalidInputError) as error:
        raise CorruptDataError(
            f"the server's model registry {registry} cannot be read ({error})"
        ) from None
    return root, labels


def named_on_server(base: Path, label: str) -> Path | None:
    """The run folder of `project/name` on the server whose state is `base`, if it has one;
    UsageError-worthy ambiguity (two tenants, one name) is InvalidInputError."""
    found = server_runs(base)
    if found is None:
        return None
    matches = [path for path, name in found[1].items() if name == label]
    if len(matches) > 1:
        raise InvalidInputError(
            f"{len(matches)} tenants of this server have a model {label}; pass its folder: "
            + ", ".join(str(path) for path in sorted(matches))
        )
    return matches[0] if matches else None
