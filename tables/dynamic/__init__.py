"""Dynamic embedding tables: ids admitted into rows of their own as they come, and let go when they stop coming.

layer.py is the Keras layer (DynamicTables), kind.py the kind the rest of the toolkit sees (tables/table_kind.py);
partition.py the index, bookkeeping, lock and sweeps on each ps; allocator.py its free rows (a first-in-first-out
queue); sketch.py the admission counts; expiry.py when rows expire (steps or seconds); guard.py the generations that
keep an update out of a row that changed hands; mixing.py the id hashing; checkpoint.py and rows_io.py the
checkpoint form; exported.py the exported form; report.py what the chief reports of them (tables/memory.py: what
all of it costs a ps). docs/dynamic-embeddings.md tells how it works.
"""
