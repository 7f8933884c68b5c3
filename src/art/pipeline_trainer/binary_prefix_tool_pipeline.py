"""ART's `art.pipeline_trainer.binary_prefix_tool_pipeline`, under arthex: ART's binary-prefix
tool-call PipelineTrainer example written over arthex (arthex/apps/examples/binary_prefix_tool.py).

Each of ART's names here is arthex's own object (the table: arthex/art/_table.py;
docs/migrating-from-art.md). Run the example as ART's:
`python -m arthex.art.pipeline_trainer.binary_prefix_tool_pipeline`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.apps.examples.binary_prefix_tool import SECRET_BITS as SECRET_BITS
    from arthex.apps.examples.binary_prefix_tool import SECRET_LEN as SECRET_LEN
    from arthex.apps.examples.binary_prefix_tool import SYSTEM_PROMPT as SYSTEM_PROMPT
    from arthex.apps.examples.binary_prefix_tool import TOOL_CHOICE as TOOL_CHOICE
    from arthex.apps.examples.binary_prefix_tool import TOOL_NAME as TOOL_NAME
    from arthex.apps.examples.binary_prefix_tool import TOOLS as TOOLS
    from arthex.apps.examples.binary_prefix_tool import USER_PROMPT as USER_PROMPT
    from arthex.apps.examples.binary_prefix_tool import PipelineConfig as PipelineConfig
    from arthex.apps.examples.binary_prefix_tool import Scenario as Scenario
    from arthex.apps.examples.binary_prefix_tool import extract_guess as extract_guess
    from arthex.apps.examples.binary_prefix_tool import get_model_output_dir as get_model_output_dir
    from arthex.apps.examples.binary_prefix_tool import is_valid_guess as is_valid_guess
    from arthex.apps.examples.binary_prefix_tool import main as main
    from arthex.apps.examples.binary_prefix_tool import (
        print_history_summary as print_history_summary,
    )
    from arthex.apps.examples.binary_prefix_tool import shared_prefix_len as shared_prefix_len

    __all__ = [
        "SECRET_BITS",
        "SECRET_LEN",
        "SYSTEM_PROMPT",
        "TOOLS",
        "TOOL_CHOICE",
        "TOOL_NAME",
        "USER_PROMPT",
        "PipelineConfig",
        "Scenario",
        "extract_guess",
        "get_model_output_dir",
        "is_valid_guess",
        "main",
        "print_history_summary",
        "shared_prefix_len",
    ]
elif __name__ == "__main__":  # `python -m`: the example itself
    from arthex.apps.examples import runtime
    from arthex.apps.examples.binary_prefix_tool import main

    runtime.run_example(main)
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
