"""A Kafka topic followed as a folder is (`training.data_dir` kafka://HOST:PORT/TOPIC): the chief reads it at offsets
the run keeps itself (watch.py), into files of offset ranges (spool.py) that the follow loop trains once each."""
