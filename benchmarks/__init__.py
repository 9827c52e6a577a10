"""dualgraph's benchmark suite: the workloads of shared/BENCHMARKS.md, side by side."""
