"""dualgraph's benchmark suite: the workloads of docs/benchmarks.md, side by side."""
