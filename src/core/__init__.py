"""The domain: values, metric rules, policies and the use cases. No adapter, no heavy library."""
