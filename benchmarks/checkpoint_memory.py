"""Activation checkpointing on the W3 GPT training step: peak memory and step time, with
and without checkpointing each block, eager and compiled: ``python -m
benchmarks.checkpoint_memory``.

Memory: ``tracemalloc`` (NumPy reports its array allocations to it), started before the
model is built, over the third training step: what is allocated when the step begins (the
weights, AdamW's moments and, compiled, the buffers the generated code keeps between
calls) and the step's peak above that (eager: the activations, the gradients and the
temporaries; compiled: what the step allocates afresh). Compiled, also the memory plan of
the step's graph (``plan_memory``): the peak of live intermediate values, gradients
included, in the order the code runs them (``live_peak``), and the bytes of the buffers
the plan lays out (``peak_after``). Step time: the median of ``--steps`` steps after the
warm-up, wall clock and the process's CPU time (less sensitive to other programs on a
shared machine). Each configuration runs in its own child process.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import tracemalloc


def measure(compiled: bool, checkpoint: bool, steps: int) -> dict:
    import numpy as np

    import dualgraph as dg
    from benchmarks import w3_gpt_train as w3
    tracemalloc.start()   # (before the model exists: the weights are traced too)
    fn, x, y = w3.build(dg, w3.make_data(), checkpoint_blocks=checkpoint)
    if compiled:
        fn = dg.compile(fn)
    first = fn(x, y).item()
    fn(x, y)
    start = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    fn(x, y)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    walls, cpus = [], []
    for _ in range(steps):
        t, c = time.perf_counter(), time.process_time()
        fn(x, y)
        walls.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    out = {"first_loss": first, "step_ms": float(np.median(walls) * 1e3),
           "cpu_ms": float(np.median(cpus) * 1e3), "step_start": start,
           "step_peak": peak - start, "total_peak": peak}
    if compiled:
        plan = next(r for r in fn._last.reports if r.name == "plan_memory").data
        out.update(live_peak=plan.live_peak, buffers=plan.peak_after)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--threads", type=int, help="BLAS threads of the children (as "
                        "benchmarks.run's --threads: steadier on a busy machine)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        compiled, checkpoint = (c == "1" for c in args.child)
        print(json.dumps(measure(compiled, checkpoint, args.steps)))
        return
    env = dict(os.environ)
    if args.threads:
        for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env[name] = str(args.threads)
    rows = {}
    for compiled in (False, True):
        for checkpoint in (False, True):
            key = f"{int(compiled)}{int(checkpoint)}"
            done = subprocess.run([sys.executable, "-m", "benchmarks.checkpoint_memory",
                                   "--child", key, "--steps", str(args.steps)],
                                  capture_output=True, text=True, check=True, env=env)
            rows[key] = json.loads(done.stdout.strip().splitlines()[-1])
    def mib(n):
        return f"{n / 2**20:.2f} MiB"

    print("| mode | checkpoint | loss | traced at step start | step peak above start | "
          "plan: live peak | plan: buffers | step ms (wall) | step ms (CPU) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for key, r in rows.items():
        print(f"| {'compiled' if key[0] == '1' else 'eager'} | "
              f"{'each block' if key[1] == '1' else 'none'} | {r['first_loss']:.6f} | "
              f"{mib(r['step_start'])} | {mib(r['step_peak'])} | "
              f"{mib(r['live_peak']) if 'live_peak' in r else '-'} | "
              f"{mib(r['buffers']) if 'buffers' in r else '-'} | {r['step_ms']:.1f} | "
              f"{r['cpu_ms']:.1f} |")
    for mode, (a, b) in (("eager", ("00", "01")), ("compiled", ("10", "11"))):
        for what in ("step_peak", "total_peak", "live_peak"):
            if what in rows[a]:
                saved = 1 - rows[b][what] / rows[a][what]
                print(f"{mode}: {what} {saved:.0%} lower with checkpointing")
        for what in ("step_ms", "cpu_ms"):
            cost = rows[b][what] / rows[a][what] - 1
            print(f"{mode}: {what} {cost:+.0%} with checkpointing")

if __name__ == "__main__":
    main()
