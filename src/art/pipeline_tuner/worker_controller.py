"""ART's module `art.pipeline_tuner.worker_controller`, not in arthex.

Importing it raises a one-line error saying what to use instead."""

from arthex.art._table import refuse_module

refuse_module(__name__)
