"""Embedding tables: hashed tables at scale, dynamic tables on drifting clicks, admission and the id index."""
