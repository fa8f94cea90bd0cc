"""Runnable examples: python -m luminal.examples.<name> --help."""
