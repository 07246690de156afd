"""Input pipelines: each source's examples/s, and Criteo's byte-range against element sharding."""
