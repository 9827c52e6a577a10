"""Which compiled nodes run on one thread: the node profile with the thread count of every
shared loop (``dualgraph.kernels.thread_use``) beside each node's time.

``python -m benchmarks.thread_split [--models resnet18,mobilenetv2,squeezenet,efficientnet,
encoder] [--batches 1,16] [--calls 5] [--min-us 50] [--threads=2]``: each model
(``benchmarks.unseen_cnns``'s CNNs on 224x224 images, ``benchmarks.unseen_transformers``'s
encoder on 128 token ids) ``dg.compile``d and run under ``dg.profiler`` while the shared
loops are recorded. A node's *shared* time is the time of its loops that asked for more
than one thread (and, apart, of those that got them: on a busy host the relay backs off
and runs the rows alone); the rest ran on one thread, in its loops or outside them
(NumPy and OpenBLAS calls, listed as "other": a big GEMM threaded by OpenBLAS itself
counts there). Printed per model and batch: the shares of node time, and the nodes of at
least ``--min-us`` with less than half their time shared, grouped by op and loops (of
the call with the least node time). Wall time on a loaded host says little about the
split; this says it whatever the load.

``--workloads W1,W3`` does the same for eager training steps (``benchmarks/run.py``'s
workloads, their ``build`` on dualgraph): each eager op (forward, backward and optimiser
ops alike, keyed by position, op and input shapes) in place of a node, ``--calls`` steps.
"""
from __future__ import annotations

import argparse
import os
import sys
from collections import defaultdict

THREADS = int(next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--threads=")), 2))
for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "DUALGRAPH_NUM_THREADS"):
    os.environ[_name] = str(THREADS)

import numpy as np  # noqa: E402

from .common import random_state  # noqa: E402


def model_and_input(name: str, batch: int):
    """``(make, x)``: the model ``make(lib)`` and an input for it."""
    from . import unseen_cnns, unseen_transformers
    if name in unseen_cnns.MODELS:
        x = np.random.default_rng(0).standard_normal((batch, 3, 224, 224)).astype(np.float32)
        return unseen_cnns.MODELS[name], x
    x = unseen_transformers.example(name, batch, np.random.default_rng(0))
    return unseen_transformers.MODELS[name], x


def split(make, x: np.ndarray, calls: int) -> list:
    """Per call, ``{node key: [ns, asked ns, ran ns, {loop: threads asked}]}`` of
    ``make``'s model compiled: each node's time, the time of its loops that asked for
    several threads and of those that ran on several; nodes keyed by position, op and
    input shapes."""
    import dualgraph as dg
    import torch
    from dualgraph.kernels import thread_use
    from dualgraph.profiler import profile
    dg.set_num_threads(THREADS)
    model = make(dg).eval()
    state = random_state(make(torch).eval(), 0)
    model.load_state_dict({k: dg.tensor(v) for k, v in state.items()})
    compiled, dx = dg.compile(model), dg.tensor(x)
    with dg.no_grad():
        for _ in range(3):
            compiled(dx)
        with profile(record_shapes=True) as prof, thread_use.recording() as loops:
            for _ in range(calls):
                compiled(dx)
    return [_with_loops(program.cpu_children, loops, prof._base)
            for program in prof.events() if program.kind == "program"]


def _with_loops(events, loops: list, base: int | None) -> dict:
    """``{key: [ns, asked ns, ran ns, {loop: threads asked}]}`` of the profiler's
    ``events`` (nodes or eager ops) with the shared-loop calls ``loops`` that began inside
    each (``thread_use``'s records, on ``perf_counter_ns`` from ``base``, the events'
    zero)."""
    starts = np.array([c[3] for c in loops], np.int64)
    nodes = {}
    for i, e in enumerate(events):
        nodes[i, e.name.split("::", 1)[-1], str(e.input_shapes)] = node = [
            1e3 * e.cpu_time_total, 0.0, 0.0, {}]
        first, last = int((base or 0) + 1e3 * e.start_us), int((base or 0) + 1e3 * e.end_us)
        for j in range(np.searchsorted(starts, first), np.searchsorted(starts, last)):
            name, asked, ran, start, end = loops[j]
            node[3][name] = max(node[3].get(name, 1), asked)
            node[1] += (end - start) * (asked > 1)
            node[2] += (end - start) * (ran > 1)
    return nodes


def eager_split(workload: str, steps: int) -> list:
    """Per step of ``workload``'s eager training step (its ``build`` on dualgraph), what
    :func:`split` gives per call, with the step's eager ops for nodes."""
    import importlib

    import dualgraph as dg
    from dualgraph.kernels import thread_use
    from dualgraph.profiler import profile

    from .run import WORKLOADS
    dg.set_num_threads(THREADS)
    mod = importlib.import_module(f"benchmarks.{WORKLOADS[workload]}")
    step, *args = mod.build(dg, mod.make_data())
    for _ in range(3):
        step(*args)
    per_step = []
    for _ in range(steps):
        with profile(record_shapes=True) as prof, thread_use.recording() as loops:
            step(*args)
        ops = [e for e in prof.events() if e.kind == "op"]
        per_step.append(_with_loops(ops, loops, prof._base))
    return per_step


def report(title: str, per_call: list, min_us: float) -> None:
    """The share of node time in loops that asked for several threads and that ran on
    several (of the call with the least node time), and the nodes of at least ``min_us``
    with less than half their time in loops asking for several, grouped by op and
    loops."""
    best = min(per_call, key=lambda nodes: sum(n[0] for n in nodes.values()))
    total = sum(n[0] for n in best.values())
    asked = sum(n[1] for n in best.values())
    ran = sum(n[2] for n in best.values())
    print(f"\n{title}: nodes {total / 1e6:.2f} ms; in loops asking for several "
          f"threads {asked / 1e6:.2f} ms ({100 * asked / total:.0f}%), run on several "
          f"{ran / 1e6:.2f} ms ({100 * ran / total:.0f}%)")
    groups = defaultdict(lambda: [0, 0.0])
    for (_, op, _), (ns, asked_ns, _, loops) in best.items():
        if ns >= 1e3 * min_us and asked_ns < ns / 2:
            loops_ = ",".join(f"{k} x{t}" for k, t in sorted(loops.items())) or "other"
            groups[op, loops_][0] += 1
            groups[op, loops_][1] += ns / 1e6
    print("| op | loops (threads asked) | nodes | ms |")
    print("|---|---|---|---|")
    for (op, loops_), (count, ms) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
        print(f"| {op} | {loops_} | {count} | {ms:.2f} |")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="resnet18,mobilenetv2,squeezenet,efficientnet,"
                                            "encoder")
    parser.add_argument("--batches", default="1,16")
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--min-us", type=float, default=50.0)
    parser.add_argument("--threads", type=int, default=2, help="read before NumPy loads")
    parser.add_argument("--workloads", default="",
                        help="eager training steps (W1,W3, ...) instead of the models")
    args = parser.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.1f}, {THREADS} thread(s)", flush=True)
    for workload in filter(None, args.workloads.split(",")):
        report(f"{workload} eager step", eager_split(workload, args.calls), args.min_us)
        sys.stdout.flush()
    for name in ([] if args.workloads else args.models.split(",")):
        for batch in map(int, args.batches.split(",")):
            make, x = model_and_input(name, batch)
            report(f"{name} batch {batch}", split(make, x, args.calls), args.min_us)
            sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
