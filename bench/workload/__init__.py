"""The reference workload (`python -m bench`): steps/s, transfers, levers, scaling, strategies, operations, plans."""
