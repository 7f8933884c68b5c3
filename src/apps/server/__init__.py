"""`arthex serve`: the self-hosted training server that ServerlessBackend clients talk to.

`python -m arthex.apps.server --help` lists its options (the same as `arthex serve --help`).
"""
