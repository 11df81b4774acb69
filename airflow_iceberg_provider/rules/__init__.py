"""Pure rules: what is allowed and what to do, decided from plain values (no I/O)."""
