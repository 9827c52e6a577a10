"""A training step with a debugging print in its forward, split at the graph break, against
the same step run eagerly (what a graph break cost before: the whole function fell back to
eager) and against the step without the print, compiled whole: ``python -m
benchmarks.graph_break_split``.

Two models: W1's MLP (784-512-512-10, batch 128, SGD with momentum: matrix products
dominate) and a small MLP (32-64-64-10, batch 16: the per-call cost of dualgraph's Python
dominates). The print writes ``h.mean()`` of the first hidden activation to a string
buffer. A split step traces its Python at every call (capture/split.py), so its cost over
the unsplit compiled step is that trace, the pieces' launches and the print itself.
The variants run interleaved, round by round; each reports its best round (the median
step of ``--steps``) in CPU time of the process (less sensitive than the wall clock to
other programs on a shared machine; run with ``OPENBLAS_NUM_THREADS=1`` so that it is one
thread's), and the ratios to eager. Not a workload of the suite (no peers).
"""
from __future__ import annotations

import argparse
import io
import time
import warnings

import numpy as np

MODELS = {"w1_mlp": ((784, 512, 512, 10), 128), "small_mlp": ((32, 64, 64, 10), 16)}
VARIANTS = ("eager", "split", "whole")   # eager fallback, split at the print, no print


def build(dg, sizes, batch, variant):
    """The step of ``variant`` and its arguments (same weights and data for all)."""
    nn = dg.nn
    dg.manual_seed(0)
    sink = io.StringIO()

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes, sizes[1:]))

        def forward(self, x):
            for i, layer in enumerate(self.layers):
                x = layer(x)
                if i < len(self.layers) - 1:
                    x = dg.relu(x)
                if i == 0 and variant != "whole":
                    print("h", x.mean(), file=sink)   # the debugging line
            return x

    model = Net()
    opt = dg.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step(x, y):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    rng = np.random.default_rng(0)
    x = dg.tensor(rng.standard_normal((batch, sizes[0])).astype(np.float32))
    y = dg.tensor(rng.integers(0, sizes[-1], batch))
    return (step if variant == "eager" else dg.compile(step)), x, y


def main():
    import dualgraph as dg
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    for name, (sizes, batch) in MODELS.items():
        steps = {v: build(dg, sizes, batch, v) for v in VARIANTS}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for fn, x, y in steps.values():   # (warm-up: traces, compiles, kernels)
                for _ in range(5):
                    fn(x, y)
            best = dict.fromkeys(VARIANTS, float("inf"))
            for _ in range(args.rounds):
                for v, (fn, x, y) in steps.items():
                    times = []
                    for _ in range(args.steps):
                        start = time.process_time()
                        fn(x, y)
                        times.append(time.process_time() - start)
                    best[v] = min(best[v], float(np.median(times)))
        pieces = sum(". compiled piece" in line for line in steps["split"][0].explain()
                     .splitlines())
        print(f"{name}: eager (the fallback) {best['eager'] * 1e3:.2f} ms, split at the print "
              f"{best['split'] * 1e3:.2f} ms ({pieces} pieces compiled), compiled without "
              f"the print {best['whole'] * 1e3:.2f} ms; eager / split "
              f"{best['eager'] / best['split']:.2f}x, eager / whole "
              f"{best['eager'] / best['whole']:.2f}x")


if __name__ == "__main__":
    main()
