"""The driving side: the `arthex` command (cli/), the training server (server/), the demo and
the loaders that read runs for analysis. Apps may use the composition root and adapters; nothing
in the library imports an app."""
