"""The demos `arthex demo` runs: task.py (the digits task on the tiny model), rl.py (RL, and
the same through PipelineTrainer), life.py (SFT warm start, RL, export, a load without arthex)."""
