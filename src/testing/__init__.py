"""The contract kit: one mixin per port, verified in-memory fakes, and what the tests need."""
