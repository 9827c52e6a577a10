"""Profile one workload's implementation with cProfile: ``python -m benchmarks.profile W1``.

Builds the implementation (default ``dualgraph_eager``), runs warm-up steps, then profiles
``--steps`` steps and prints the functions with the most own time (tottime), each with its
share of the profiled time, so the hotspots to optimise stand out.
"""
from __future__ import annotations

import argparse
import cProfile
import importlib
import pstats
import sys
import time

from .run import WORKLOADS


def profile(workload_id: str, impl: str, steps: int, warmup: int) -> pstats.Stats:
    mod = importlib.import_module(f"benchmarks.{WORKLOADS[workload_id]}")
    step = mod.IMPLS[impl](mod.make_data())
    for _ in range(warmup):
        step()
    # (process CPU time: with the default wall clock, time this process waits for a core on
    # a shared machine lands in whatever function runs then, and buries the real hotspots)
    prof = cProfile.Profile(time.process_time)
    prof.enable()
    for _ in range(steps):
        step()
    prof.disable()
    return pstats.Stats(prof)


def hotspots(stats: pstats.Stats, steps: int, top: int) -> list[str]:
    """One line per function: share of the total, own ms per step, calls per step."""
    total = stats.total_tt
    rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:top]
    lines = [f"{'share':>6} {'own ms/step':>11} {'calls/step':>10}  function"]
    for (path, line, name), (_, ncalls, tottime, _, _) in rows:
        where = f"{path.split('site-packages/')[-1].split('/work/main/')[-1]}:{line}"
        lines.append(f"{100 * tottime / total:5.1f}% {1e3 * tottime / steps:11.2f} "
                     f"{ncalls / steps:10.0f}  {name} ({where})")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile")
    parser.add_argument("workload", choices=list(WORKLOADS))
    parser.add_argument("--impl", default="dualgraph_eager")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    stats = profile(args.workload, args.impl, args.steps, args.warmup)
    print(f"{args.workload} {args.impl}: {1e3 * stats.total_tt / args.steps:.1f} ms/step "
          f"profiled over {args.steps} steps")
    print("\n".join(hotspots(stats, args.steps, args.top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
