"""The run directory's small files beside the ledger: `state.json` (a model's own state),
`pipeline_state.json` (the pipeline's record) and `trainer.lease` (one trainer per run)."""
