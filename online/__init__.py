"""Online training and publication: follow mode (files trained once as they land) and what is served (versions,
deltas, the follower)."""
