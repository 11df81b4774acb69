"""Benchmarks: run one as ``python -m bench.<name>`` from the repository root (``make bench`` runs them all)."""
