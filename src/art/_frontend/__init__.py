"""What arthex.art does itself: ART's frontend utilities that have no arthex name of their own
(writing a trajectory file to a path, stripping logprobs, cost tables, ...), built on arthex's
core and adapters. The table (`arthex/art/_table.py`) points ART's names here; the core never
learns them."""
