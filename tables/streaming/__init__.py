"""Checkpoint bundles read and written a chunk of rows at a time, so no process holds a whole table: rows.py sizes
the chunks, bundle.py reads and writes TensorFlow's bundle format by row ranges, entries.py finds what a model and
its optimizers save (and which of it is a table), checkpoint_io.py saves and restores through them."""
