"""The kubernetes backend: cluster.json as a JobSet (jobset.py, pods.py) run, watched and deleted through kubectl."""
