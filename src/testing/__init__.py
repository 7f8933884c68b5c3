"""The contract kit: one mixin per port, verified in-memory fakes, and what the tests need.

`arthex.testing.tiny_model(directory)` is the function (imported here first, so that the
package attribute stays the function even after `arthex.testing.tiny_model` the module is
imported elsewhere).
"""

from .tiny_model import tiny_model

__all__ = ["tiny_model"]
