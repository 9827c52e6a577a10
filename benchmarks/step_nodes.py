"""Each node of a compiled training step, its CPU time in the step against the same call
alone, warm and with the caches evicted: ``python -m benchmarks.step_nodes W3 [--steps 10]
[--top 12] [--evict-mb 4]``.

A node can take longer inside the step than in a loop of its own, and a profile under
load shows more: ``dg.profiler`` stamps wall-clock time, which on a shared machine also
counts the time the thread waits for a core. Here every time is the thread's CPU time
(``time.thread_time_ns``), so what is left of the gap is the node's own work on the data
as the step leaves it. The workloads are ``benchmarks.torch_idiomatic``'s (W1-W4, one
thread). The step's generated function looks its kernels up in its module's globals at
each call, so each one is wrapped there by a timer (a call site is the kernel and its
place in the step's order). After the timed steps each of the ``--top`` nodes runs again
on the arguments of its last call: twenty times back to back (warm: its operands in the
caches), then ten times each after writing ``--evict-mb`` MB of other data (cold: the
second-level cache is 2 MB a core on the Intel Xeon this was written on). Kernels that
update in place (an optimiser's update, a gradient's relu) run again too: the model is
not used afterwards.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
import time

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
             "DUALGRAPH_NUM_THREADS"):   # (before NumPy loads: one thread, as the peers)
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

from .torch_idiomatic import WORKLOADS  # noqa: E402


class Timers:
    """Timers wrapped around a generated step's kernels, keyed by call site."""

    def __init__(self):
        self.ns, self.last, self.kernel, self.order = {}, {}, {}, 0

    def wrap(self, name, fn):
        def timed(*args, **kwargs):
            site = (self.order, name)
            self.order += 1
            self.last[site], self.kernel[site] = (args, kwargs), fn
            start = time.thread_time_ns()
            try:
                return fn(*args, **kwargs)
            finally:
                self.ns[site] = self.ns.get(site, 0) + time.thread_time_ns() - start
        return timed


def _median_ns(fn, args, kwargs, times, before=None) -> float:
    spent = []
    for _ in range(times):
        if before is not None:
            before()
        start = time.thread_time_ns()
        fn(*args, **kwargs)
        spent.append(time.thread_time_ns() - start)
    return float(np.median(spent))


def run(workload: str, steps: int, top: int, evict_mb: int) -> list[str]:
    import dualgraph.compat
    dualgraph.compat.install_torch_alias()
    import torch
    build, module = WORKLOADS[workload]
    data = importlib.import_module(f"benchmarks.{module}").make_data()
    fn, *args = build(torch, data)
    fn = torch.compile(fn)
    for _ in range(5):
        fn(*args)
    program = fn._last.executable.program
    timers = Timers()
    for name, value in list(program.globals.items()):
        if callable(value) and not isinstance(value, type) and value is not program.fn:
            program.globals[name] = timers.wrap(name, value)
    spent = []
    for _ in range(steps):
        timers.order = 0
        start = time.thread_time()
        fn(*args)
        spent.append(time.thread_time() - start)
    step_ms = 1e3 * float(np.median(spent))
    junk = np.zeros(evict_mb << 18, np.float32)

    def evict():
        junk.fill(1.0)

    lines = [f"{workload}: step {step_ms:.2f} ms CPU (median of {steps}); nodes by their "
             f"time in the step (ms a call; cold: after writing {evict_mb} MB)",
             f"{'in step':>8} {'alone':>8} {'cold':>8} {'step/alone':>10}  node (input shapes)"]
    for site in sorted(timers.ns, key=timers.ns.get, reverse=True)[:top]:
        (call_args, kwargs), kernel = timers.last[site], timers.kernel[site]
        warm = _median_ns(kernel, call_args, kwargs, 20)
        cold = _median_ns(kernel, call_args, kwargs, 10, evict)
        shapes = [tuple(a.shape) for a in call_args if hasattr(a, "shape")][:3]
        in_step = timers.ns[site] / steps
        lines.append(f"{in_step / 1e6:8.3f} {warm / 1e6:8.3f} {cold / 1e6:8.3f} "
                     f"{in_step / warm:10.2f}  {site[1]} {shapes}")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.step_nodes")
    parser.add_argument("workload", choices=list(WORKLOADS))
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--evict-mb", type=int, default=4)
    args = parser.parse_args(argv)
    print("\n".join(run(args.workload, args.steps, args.top, args.evict_mb)))
    print(f"load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
