"""What the benchmarks share: a loopback cluster, CPU and memory caps, the quiet check, socket byte counts."""
