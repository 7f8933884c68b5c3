"""What transformers and peft print that is no news to an arthex user, silenced at the places
arthex loads or saves a model through them.

- Progress bars ("Loading weights", "Writing model shards") when stderr is not a terminal: in
  a log file each one is a line of carriage returns per load, and a run loads at every step.
- peft's `is_gradient_checkpointing` FutureWarning: peft asks transformers a deprecated
  question on every LoRA wrap; nothing for the user to act on. Only that one warning is
  ignored, only as raised by transformers.modeling_utils.

Both are process-wide settings, made once; on a terminal the bars stay.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

_done = False


def quiet_hf() -> None:
    """Silence the noise above. Idempotent: the warning filter is put back in front each time
    (code that resets the filters, as pytest does per test, has it again), the bars are
    switched off once."""
    global _done
    warnings.filterwarnings(
        "ignore",
        message="`is_gradient_checkpointing` is deprecated",
        category=FutureWarning,
        module="transformers.modeling_utils",
    )
    if _done:
        return
    _done = True
    if not _on_a_terminal():
        try:
            from transformers.utils import logging as hf_logging_module
        except ImportError:
            return
        hf_logging: Any = hf_logging_module  # untyped helpers
        hf_logging.disable_progress_bar()


def _on_a_terminal() -> bool:
    stream = sys.stderr
    return stream is not None and hasattr(stream, "isatty") and stream.isatty()
