#!/usr/bin/env bash
# `make mutants`: mutation testing with mutmut against the fast tests, one set at a time. A set
# is a mutmut configuration: `core` (tools/mutmut.toml: the core) or a file tools/mutmut/SET.toml
# (one adapter module and its own fast tests). Not part of CI: it takes long. See docs/testing.md.
#
#   tools/mutants.sh                    # the core
#   tools/mutants.sh SET                # one set
#   tools/mutants.sh SET MUTANT...      # re-test some mutants of a set (names or fnmatch patterns)
#
# mutmut names a mutant after its file's path, and the tests must import the mutated copy. Here
# the import package `arthex` is the folder `src/`, so the run happens in a scratch tree where
# the package is a folder named `arthex` (a copy of src/), next to a copy of the tests; each set
# has its own (`.mutants/` for the core, `.mutants-SET/` for the others), so each stays
# incremental. MUTANTS_CHILDREN (default 2) caps mutmut's workers.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
MUTMUT="$(dirname "$PY")/mutmut"
SET=core
if [[ $# -gt 0 && ( "$1" == core || -f "$ROOT/tools/mutmut/$1.toml" ) ]]; then
    SET="$1"
    shift
fi
if [[ "$SET" == core ]]; then
    CONFIG="$ROOT/tools/mutmut.toml"
    WORK="${MUTANTS_DIR:-$ROOT/.mutants}"
else
    CONFIG="$ROOT/tools/mutmut/$SET.toml"
    WORK="${MUTANTS_DIR:-$ROOT/.mutants-$SET}"
fi
mkdir -p "$WORK"
rm -rf "$WORK/arthex" "$WORK/tests"
cp -r "$ROOT/src" "$WORK/arthex"
cp -r "$ROOT/tests" "$WORK/tests"
cat "$ROOT/pyproject.toml" "$CONFIG" > "$WORK/pyproject.toml"
cd "$WORK"
nice -n 15 "$MUTMUT" run --max-children "${MUTANTS_CHILDREN:-2}" "$@" || true
echo "set $SET:"
"$PY" "$ROOT/tools/mutants_score.py" "$WORK"
