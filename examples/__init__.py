"""Train functions for the demo and the docs (``examples.train:train_fn``)."""
