"""ART 0.5.23's two runnable pipeline examples, written over arthex: yes_no_maybe.py (a one-call
group of completions scored by their first word) and binary_prefix_tool.py (a forced tool call
guessing a secret bit string). `arthex.art.pipeline_trainer.yes_no_maybe_pipeline` and
`...binary_prefix_tool_pipeline` name them under ART's paths; runtime.py is how both pick
their backend and base model (docs/migrating-from-art.md)."""
