"""Minor page faults and CPU time per training step, and where a compiled step's fresh
arrays come from: ``python -m benchmarks.step_faults [--workloads w1,w2] [--steps 30]
[--impl dualgraph_eager] [--nodes]``.

For each workload's ``dualgraph_compiled`` step (or ``--impl``'s: ``dualgraph_eager``,
W4's ``dualgraph_compiled_scan`` and ``dualgraph_to_static``) (one thread: set
``DUALGRAPH_NUM_THREADS=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1``): after a warm-up,
the ``ru_minflt`` delta over the timed steps per step and the best and median step CPU
time (``time.process_time``). ``--nodes`` also runs one step through each executable's
instrumented code and sums the bytes of the arrays each node made afresh (the memory
under a result, counted once, unless it is a planned buffer or an input's), per op, the
values returned by the graph apart. Run it once default and once with ``DUALGRAPH_CPU_TUNING=1`` (malloc
thresholds raised) to compare. Not a workload of the suite (docs/benchmarks.md).
"""
from __future__ import annotations

import argparse
import importlib
import resource
import statistics
import time

MODULES = {"w1": "w1_mlp_train", "w2": "w2_cnn_train", "w3": "w3_gpt_train",
           "w4": "w4_lstm_train", "w11": "w11_resnet_cifar_train"}


def executables(step):
    """The Executables of a compiled step (forward and backward of each cached graph)."""
    compiled = step.explain.__self__   # (the dg.compile object)
    for entry in compiled.cache.values():
        for exe in (entry.executable, entry.backward_executable):
            if exe is not None:
                yield exe


def fresh_bytes(step) -> dict:
    """``{op name: bytes}`` of the arrays one step's nodes made afresh; ``"<returned>"``
    sums those the graphs return."""
    import numpy as np
    totals: dict[str, int] = {}
    patched = []
    compiled = step.explain.__self__
    fast, compiled._fast = compiled._fast, None   # (its inlined call bypasses ``run``)
    seen: set = set()   # ids of the arrays owning memory counted or not fresh
    held = []           # (kept alive through the step, so that no id is reused)

    def root(a):
        while isinstance(a.base, np.ndarray):
            a = a.base
        held.append(a)
        return a

    def run(exe, arrays, on_node):
        arrays = [np.asarray(a) for a in arrays]
        seen.update(id(root(a)) for a in arrays)
        for bufs in exe._buffers.values():
            seen.update(id(root(b)) for b in bufs or ())
        return exe.run_timed(arrays, on_node)

    for exe in executables(step):
        outputs = set(exe.graph.outputs)

        def on_node(node, outs, outputs=outputs):
            for v, a in zip(node.outputs, outs):
                if not isinstance(a, np.ndarray) or id(root(a)) in seen:
                    continue
                seen.add(id(root(a)))
                if root(a).nbytes >= 4096:
                    key = "<returned>" if v in outputs else node.op.name
                    totals[key] = totals.get(key, 0) + root(a).nbytes

        original = exe.run
        exe.run = (lambda arrays, on_node=None, exe=exe, cb=on_node: run(exe, arrays, cb))
        patched.append((exe, original))
    step()
    compiled._fast = fast
    for exe, original in patched:
        exe.run = original
    return totals


def measure(name: str, steps: int, nodes: bool, impl: str = "dualgraph_compiled"):
    module = importlib.import_module(f"benchmarks.{MODULES[name]}")
    if impl not in module.IMPLS:
        print(f"{name}: no implementation {impl}", flush=True)
        return
    steps = min(steps, 2 * getattr(module, "TIMED", steps))   # (W11: ~10x longer steps)
    step = module.IMPLS[impl](module.make_data())
    for _ in range(max(10, steps // 2)):
        step()
    times = []
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(steps):
        t = time.process_time()
        step()
        times.append(time.process_time() - t)
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / steps
    print(f"{name} {impl}: {faults:8.1f} minor faults/step, step CPU best {min(times) * 1e3:.2f} ms, "
          f"median {statistics.median(times) * 1e3:.2f} ms", flush=True)
    if nodes and hasattr(step, "explain"):
        totals = fresh_bytes(step)
        for op, b in sorted(totals.items(), key=lambda kv: -kv[1])[:12]:
            print(f"    {op:32s} {b / 2**20:8.2f} MiB")
        print(f"    total fresh {sum(totals.values()) / 2**20:.2f} MiB/step", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--workloads", default="w1,w2,w3,w4")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--impl", default="dualgraph_compiled",
                   help="the implementation to step (comma-separated for several)")
    p.add_argument("--nodes", action="store_true",
                   help="also the fresh arrays per op (compiled implementations)")
    a = p.parse_args()
    for name in a.workloads.split(","):
        for impl in a.impl.split(","):
            measure(name, a.steps, a.nodes, impl)


if __name__ == "__main__":
    main()
