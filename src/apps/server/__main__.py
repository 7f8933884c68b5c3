"""`python -m arthex.apps.server`: the `arthex serve` command line, run on its own."""

from ..cli.serve import run_standalone

run_standalone()
