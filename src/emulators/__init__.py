"""Local stand-ins for remote services, for tests and offline use; not part of the kit.

Nothing in the library imports this package: only tests and the emulators' own entry points.
"""
