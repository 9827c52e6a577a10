"""Compile time and speed of the code generator on the benchmark workloads (W1, W3, W5).

``python tests/bench_codegen.py [W1,W3,W5]`` from the project root. For each workload it
captures the step once (no passes), then reports: capture (trace) time; passes and Python
codegen time; the first run of the optimised Executable (Numba compiles there: cold when
the kernel cache is empty, warm when a previous process filled it); and the steady time
per step of the reference interpreter, the generated code without passes, and with the
passes (+ fast_math). Run it twice with the same ``DUALGRAPH_CACHE_DIR`` to see cold and
warm compile times.
"""
import importlib
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import dualgraph as dg
from dualgraph.codegen import Executable
from dualgraph.graph.interpret import interpret

MODULES = {"W1": "w1_mlp_train", "W3": "w3_gpt_train", "W5": "w5_fused_elementwise"}


def capture(workload: str):
    """The captured graph of the workload's step and the arrays it runs on."""
    mod = importlib.import_module(f"benchmarks.{MODULES[workload]}")
    fn, *args = mod.build(dg, mod.make_data())
    compiled = dg.compile(fn, passes=False)
    t0 = time.perf_counter()
    compiled(*args)
    capture_s = time.perf_counter() - t0
    tensors = [a for a in args if isinstance(a, dg.Tensor)]
    return compiled.graph, compiled._last.inputs(tensors), capture_s


def median_ms(fns, rounds=15) -> list:
    """Median ms per call of each function, timed round-robin so that load from other
    processes hits every function alike."""
    for fn in fns:
        fn()
    times = [[] for _ in fns]
    for _ in range(rounds):
        for fn, ts in zip(fns, times):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
    return [1e3 * float(np.median(ts)) for ts in times]


def report(workload: str) -> None:
    graph, arrays, capture_s = capture(workload)
    plain = Executable(graph)
    t0 = time.perf_counter()
    opt = Executable(graph, passes=True)
    build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    opt.run(arrays)
    first_s = time.perf_counter() - t0
    fast = Executable(graph, passes=True, fast_math=True)
    fast.run(arrays)
    with np.errstate(all="ignore"):
        want = interpret(graph, *arrays)
        err = max(float(np.max(np.abs(g.astype(np.float64) - w))) if g.size else 0.0
                  for g, w in zip(opt.run(arrays), want))
    numba = sum(k.lowering is not None for k in opt.kernels.values())
    print(f"## {workload}: {len(graph.nodes)} nodes -> {len(opt.graph.nodes)} after passes, "
          f"{len(opt.kernels)} fused groups ({numba} in Numba), max |diff| {err:.2g}")
    print(f"capture {capture_s * 1e3:.0f} ms; passes {opt.times['passes_s'] * 1e3:.0f} ms; "
          f"codegen {opt.times['codegen_s'] * 1e3:.0f} ms (Executable() total "
          f"{build_s * 1e3:.0f} ms); first run (Numba compile/load) {first_s * 1e3:.0f} ms")
    rows = [("interpreter", lambda: interpret(graph, *arrays)),
            ("codegen, no passes", lambda: plain.run(arrays)),
            ("codegen + passes", lambda: opt.run(arrays)),
            ("codegen + passes + fast_math", lambda: fast.run(arrays))]
    times = median_ms([fn for _, fn in rows])
    for (name, _), ms in zip(rows, times):
        print(f"  {name:30s} {ms:9.2f} ms  x{times[0] / ms:.2f}")


if __name__ == "__main__":
    print(f"numba threads: {__import__('numba').get_num_threads()}, cache: "
          f"{os.environ.get('DUALGRAPH_CACHE_DIR', '~/.cache/dualgraph/kernels')}")
    for w in (sys.argv[1] if len(sys.argv) > 1 else "W1,W3,W5").split(","):
        report(w)
