"""oomdoctor: a post-mortem doctor for GPU out-of-memory failures in training logs."""

__version__ = "0.1.0"
