"""The steady training step of the PyTorch programs of ``tests/torch_programs/``, call by
call: ``python -m benchmarks.steady_steps [--programs realnvp,gat] [--steps 12]
[--rounds 2]``.

Each program runs its ``main(steps, compile=True)`` in a fresh process, three ways: under
PyTorch and under dualgraph eagerly (``torch.compile`` answered by a wrapper that only
times each call of the step) and under dualgraph compiled (``dg.compile``'s object, each
call timed). A call's time is its CPU time (``time.process_time``, one thread); for the
compiled step only the calls that traced nothing count (the function's graphs and records
unchanged by the call: what a step costs once its graphs are compiled). Reported per
program: the median of those calls in ms, best over the rounds, and the ratios of the
compiled step to torch's and to dualgraph's eager one; the graphs the compiled run made.
Not a workload of the suite (docs/benchmarks.md has the figures).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time

from .torch_programs_eager import PROGRAMS_DIR

MODES = ("torch", "eager", "compiled")
DEFAULT = "translation_transformer,realnvp,makemore_wavenet,gat,mnist_rnn,mobilenet_se"


def child(name: str, mode: str, steps: int) -> dict:
    """Run ``name`` in this process with every call of its compiled step timed."""
    times, graphs = [], []
    if mode != "torch":
        import dualgraph.compat
        dualgraph.compat.install_torch_alias()
    import torch
    real = torch.compile

    def timing_compile(fn=None, *args, **kwargs):
        compiled = real(fn, *args, **kwargs) if mode == "compiled" else fn
        inner = getattr(compiled, "_compiled", compiled)

        def call(*a, **k):
            before = (len(inner.cache), len(inner.records)) if mode == "compiled" else None
            t = time.process_time()
            out = compiled(*a, **k)
            spent = time.process_time() - t
            if mode != "compiled" or before == (len(inner.cache), len(inner.records)):
                times.append(spent)
            if mode == "compiled":
                graphs[:] = [len(inner.cache)]
            return out
        return call
    torch.compile = timing_compile
    spec = importlib.util.spec_from_file_location(f"torch_program_{name}",
                                                  PROGRAMS_DIR / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(steps, compile=True)
    times.sort()
    return {"median_ms": 1e3 * times[len(times) // 2] if times else None,
            "timed": len(times), "graphs": graphs[0] if graphs else None}


def measure(name: str, mode: str, steps: int) -> dict:
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
               DUALGRAPH_NUM_THREADS="1", MKL_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-m", "benchmarks.steady_steps", "--child", name,
                           mode, str(steps)], env=env, capture_output=True, text=True,
                          check=False)
    if proc.returncode:
        return {"error": proc.stderr.strip().splitlines()[-1:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.steady_steps")
    parser.add_argument("--programs", default=DEFAULT)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child", nargs=3, metavar=("NAME", "MODE", "STEPS"))
    args = parser.parse_args(argv)
    if args.child:
        name, mode, steps = args.child
        print(json.dumps(child(name, mode, int(steps))))
        return 0
    best: dict = {}
    for _ in range(args.rounds):
        for name in args.programs.split(","):
            for mode in MODES:
                got = measure(name, mode, args.steps)
                old = best.get((name, mode))
                if old is None or (got.get("median_ms") or 1e9) < (old.get("median_ms") or 1e9):
                    best[name, mode] = got
    print(f"load average {os.getloadavg()[0]:.1f}; CPU ms of a step (median of the calls "
          "that traced nothing), one thread")
    print(f"{'program':24s} {'torch':>7s} {'eager':>7s} {'compiled':>8s} {'c/torch':>7s} "
          f"{'c/eager':>7s} graphs")
    for name in args.programs.split(","):
        t, e, c = (best[name, m] for m in MODES)
        if any(x.get("median_ms") is None for x in (t, e, c)):
            print(f"{name:24s} failed: {t.get('error')} {e.get('error')} {c.get('error')}")
            continue
        t, e, cm = t["median_ms"], e["median_ms"], c["median_ms"]
        print(f"{name:24s} {t:7.2f} {e:7.2f} {cm:8.2f} {cm / t:7.2f} {cm / e:7.2f} "
              f"{c['graphs']} ({c['timed']} calls)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
