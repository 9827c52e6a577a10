"""Training steps that keep a tensor in Python state at every call or draw a Python random
number, compiled, against the same steps eager and against the plain step compiled whole:
``python -m benchmarks.python_state_steps``.

Each was sent to eager before (issue 24): a step that keeps a tensor at every call
(``history.append(loss.detach())``, a forward hook's ``self.act = out.detach()``) after
three calls, a step that draws from Python's ``random`` (teacher forcing) at once. Now the
hook's step is one graph storing a new tensor after each run, and the history's and the
random step run their Python at every call with their ops compiled and replayed
(capture/split.py), as a split function does. Two models, SGD with momentum: W1's MLP
(784-512-512-10, batch 128) and a small MLP (32-64-64-10, batch 16, where dualgraph's own
Python dominates). The variants run interleaved, round by round; each reports its best
round (the median step of ``--steps``) in CPU time of the process (run with
``OPENBLAS_NUM_THREADS=1``), and the ratios of eager to compiled. Not a workload of the
suite (no peers).
"""
from __future__ import annotations

import argparse
import random
import time
import warnings

import numpy as np

MODELS = {"w1_mlp": ((784, 512, 512, 10), 128), "small_mlp": ((32, 64, 64, 10), 16)}
KINDS = ("history", "hook", "random")


def build(dg, sizes, batch, kind, compiled):
    """The step keeping state as ``kind`` says (or "plain"), and its arguments."""
    nn = dg.nn
    dg.manual_seed(0)
    blocks = []
    for a, b in zip(sizes, sizes[1:]):
        blocks += [nn.Linear(a, b), nn.ReLU()]
    model = nn.Sequential(*blocks[:-1])
    opt = dg.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    history, rand = [], random.Random(0)
    if kind == "hook":   # (feature extraction: the layer keeps its output)
        model[1].register_forward_hook(lambda m, i, o: setattr(m, "act", o.detach()))

    def step(x, y):
        opt.zero_grad()
        h = x
        if kind == "random" and rand.random() < 0.5:   # (teacher forcing)
            h = x * 0.5
        loss = nn.functional.cross_entropy(model(h), y)
        loss.backward()
        opt.step()
        if kind == "history":
            history.append(loss.detach())
        return loss.detach()

    rng = np.random.default_rng(0)
    x = dg.tensor(rng.standard_normal((batch, sizes[0])).astype(np.float32))
    y = dg.tensor(rng.integers(0, sizes[-1], batch))
    return (dg.compile(step) if compiled else step), x, y


def main():
    import dualgraph as dg
    from dualgraph.capture import split
    split.COMPARE_AFTER = float("inf")   # (time the compiled path itself, not the choice)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    for name, (sizes, batch) in MODELS.items():
        steps = {(kind, compiled): build(dg, sizes, batch, kind, compiled)
                 for kind in KINDS for compiled in (False, True)}
        steps[("plain", True)] = build(dg, sizes, batch, "plain", True)
        best = dict.fromkeys(steps, float("inf"))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for fn, x, y in steps.values():   # (warm-up: traces, compiles, kernels)
                for _ in range(6):
                    fn(x, y)
            for _ in range(args.rounds):
                for key, (fn, x, y) in steps.items():
                    times = []
                    for _ in range(args.steps):
                        start = time.process_time()
                        fn(x, y)
                        times.append(time.process_time() - start)
                    best[key] = min(best[key], float(np.median(times)))
        parts = [f"{kind} eager {best[(kind, False)] * 1e3:.2f} ms, compiled "
                 f"{best[(kind, True)] * 1e3:.2f} ms "
                 f"({best[(kind, False)] / best[(kind, True)]:.2f}x)" for kind in KINDS]
        print(f"{name}: " + "; ".join(parts) +
              f"; plain step compiled {best[('plain', True)] * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
