"""Follow mode and publication: freshness, versions and deltas, memory as tables grow, an hour of churn."""
