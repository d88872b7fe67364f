"""Stand-in package (see standins/README.md)."""
