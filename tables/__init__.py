"""Embedding tables: hashed (fused or one per table) and dynamic ones, their optimizers, their placement on the ps,
row stamps, and their checkpoints streamed a chunk of rows at a time."""
