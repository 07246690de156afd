"""Failures: soaks with tasks killed at random, and what long-run failures cost."""
