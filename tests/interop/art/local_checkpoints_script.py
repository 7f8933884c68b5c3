"""Run `art.local.checkpoints` (ART's, or arthex's under `arthex.art`: the first argument names
the package) on copies of the run folders named by the cases read as JSON from stdin, and
print what each gave, as JSON: `get_last_checkpoint_dir` (relative to the copy), and the files
left after `delete_checkpoints(copy, excluding)` and after `migrate_checkpoints_to_new_structure`.

Each call works on its own copy (`{folder}-{package}-{n}`), so the two packages never see each
other's changes. What ART prints goes to stderr; stdout is the JSON.

Run by ART's interpreter for ART; the interop test runs arthex's cases in its own process.
"""

import contextlib
import importlib
import importlib.util
import json
import os
import shutil
import sys


def files(folder):
    found = []
    for where, _, names in os.walk(folder):
        found += [os.path.relpath(os.path.join(where, name), folder) for name in names]
    return sorted(found)


def load(lib):
    if lib != "art":
        return importlib.import_module(f"{lib}.local.checkpoints")
    folder = importlib.util.find_spec("art").submodule_search_locations[0]
    where = os.path.join(folder, "local", "checkpoints.py")
    spec = importlib.util.spec_from_file_location("art_local_checkpoints", where)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(lib, cases):
    checkpoints = load(lib)
    tag = lib.replace(".", "-")
    out = {"last": [], "deleted": [], "migrated": []}
    copies = iter(range(10**6))

    def copy(folder):
        made = f"{folder}-{tag}-{next(copies)}"
        shutil.copytree(folder, made)
        return made

    with contextlib.redirect_stdout(sys.stderr):
        for folder in cases["last"]:
            made = copy(folder)
            found = checkpoints.get_last_checkpoint_dir(made)
            out["last"].append(None if found is None else os.path.relpath(found, made))
        for folder, excluding in cases["delete"]:
            made = copy(folder)
            checkpoints.delete_checkpoints(made, excluding)
            out["deleted"].append(files(made))
        for folder in cases["migrate"]:
            made = copy(folder)
            checkpoints.migrate_checkpoints_to_new_structure(made)
            out["migrated"].append(files(made))
    return out


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1], json.load(sys.stdin))))
