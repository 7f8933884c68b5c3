#!/usr/bin/env bash
# `make mutants`: mutation testing of the core (and the ledger's reading/repair rules) with
# mutmut, against the fast tests. Not part of CI: it takes long. See docs/testing.md.
#
# mutmut names a mutant after its file's path, and the tests must import the mutated copy. Here
# the import package `arthex` is the folder `src/`, so the run happens in a scratch tree where
# the package is a folder named `arthex` (a copy of src/), next to a copy of the tests.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORK="${MUTANTS_DIR:-$ROOT/.mutants}"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
MUTMUT="$(dirname "$PY")/mutmut"
mkdir -p "$WORK"
rm -rf "$WORK/arthex" "$WORK/tests"
cp -r "$ROOT/src" "$WORK/arthex"
cp -r "$ROOT/tests" "$WORK/tests"
cat "$ROOT/pyproject.toml" "$ROOT/tools/mutmut.toml" > "$WORK/pyproject.toml"
cd "$WORK"
"$MUTMUT" run "$@" || true
"$PY" "$ROOT/tools/mutants_score.py" "$WORK"
