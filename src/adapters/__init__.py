"""Adapters: one technology behind each port. Each imports its heavy dependency lazily."""
