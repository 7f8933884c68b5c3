"""`arthex view`: a local, live, read-only web viewer of runs and their trajectories.

- `data.py` reads a run's files (history, trajectory parquet, checkpoints, model spec, pipeline
  record, lease) through the library's own readers, never writing anything;
- `app.py` is the ASGI app: the JSON API under `/api/` and the page under `/`;
- `serve.py` binds it, prints the URL and serves until stopped;
- `static/` holds the page (HTML, CSS, plain JS) and the vendored chart library.
"""
