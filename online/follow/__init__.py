"""Follow mode (`training.follow_data`): train on files as they land in a folder, each once, and keep serving versions
fresh. coordinator/following.py sets a run up and resumes it; loop.py is the chief's beat, which takes what
landing.py and watch.py find into ledger.py through intake.py (the ledger is the one record of which files are
taken, each a file_entry.py, by their identity: identity.py; files long done are folded into counts:
compaction.py), hands pieces out through schedule.py and handout.py (stragglers.py says which pieces are stuck and
go to another worker as well), checkpoints through checkpointing.py and publishes through publishing.py;
report.py says what it does, quarantine.py reports and bounds the data not trained, and errors.py tells a piece's
data error from a lost task and ends the chief at once, whatever its pieces are doing."""
