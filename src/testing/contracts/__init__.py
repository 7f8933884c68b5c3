"""Contract mixins: subclass one, override its fixture hook, and get the whole suite."""
