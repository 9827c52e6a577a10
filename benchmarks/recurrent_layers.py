"""Micro-benchmark: one ``nn.LSTM`` / ``nn.GRU`` layer (``batch_first``, 32 inputs) alone,
a training step's share of it: the forward over the sequence and ``out.sum().backward()``,
in dualgraph eager and compiled (``dg.compile``) against torch eager, on a sweep of hidden
sizes, batches and sequence lengths around W4's (H128, B32, T32).

Run ``python -m benchmarks.recurrent_layers [--rounds 15] [--kinds lstm,gru] [NAME-PART
...]`` (one thread per engine, set before NumPy loads OpenBLAS). Times are the best process
CPU time of ``--rounds`` steps, engines in turns, after warm-up; each line gives ms and
dualgraph's ratios to torch eager. The weights are torch's initial ones, copied.
"""
from __future__ import annotations

import argparse
import os
import sys

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
              "DUALGRAPH_NUM_THREADS"):
    os.environ[_name] = "1"

import numpy as np  # noqa: E402

from .depthwise_layers import best_ms  # noqa: E402

INPUTS = 32
# name, hidden, batch, steps: the hidden sweep at W4's batch and length, then the batch
# sweep and the length sweep at its hidden size
SHAPES = [("H64", 64, 32, 32), ("H128", 128, 32, 32), ("H256", 256, 32, 32),
          ("H512", 512, 32, 32), ("B1", 128, 1, 32), ("B8", 128, 8, 32), ("B64", 128, 64, 32),
          ("T8", 128, 32, 8), ("T128", 128, 32, 128)]


def _steps(kind: str, hidden: int, batch: int, steps: int):
    """``{engine: step}``: each step the layer's forward and ``out.sum().backward()``."""
    import torch

    import dualgraph as dg
    layer = getattr(torch.nn, kind.upper())(INPUTS, hidden, batch_first=True)
    ours = getattr(dg.nn, kind.upper())(INPUTS, hidden, batch_first=True)
    ours.load_state_dict({k: dg.tensor(v.detach().numpy()) for k, v in
                          layer.state_dict().items()})
    x = np.random.default_rng(0).standard_normal((batch, steps, INPUTS), dtype=np.float32)
    tx, dx = torch.tensor(x), dg.tensor(x)

    def run(module, inputs):
        out, _ = module(inputs)
        loss = out.sum()
        loss.backward()
        return loss
    compiled = dg.compile(lambda inputs: run(ours, inputs))
    return {"torch": lambda: run(layer, tx), "dualgraph": lambda: run(ours, dx),
            "compiled": lambda: compiled(dx)}


def main(argv=None):
    import torch
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--kinds", default="lstm")
    parser.add_argument("parts", nargs="*")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print(f"load average {os.getloadavg()[0]:.1f}; best CPU ms of {args.rounds}, one thread")
    for kind in args.kinds.split(","):
        for name, hidden, batch, steps in SHAPES:
            if args.parts and not any(part in name for part in args.parts):
                continue
            fns = _steps(kind, hidden, batch, steps)
            for fn in fns.values():    # (compiled: the first calls trace and compile)
                fn(), fn()
            ms = best_ms(fns, args.rounds)
            print(f"{kind} {name:5s} (H{hidden} B{batch} T{steps}) torch {ms['torch']:7.3f}  "
                  f"dualgraph {ms['dualgraph']:7.3f}  compiled {ms['compiled']:7.3f}  "
                  f"eager/torch {ms['dualgraph'] / ms['torch']:4.2f}  compiled/torch "
                  f"{ms['compiled'] / ms['torch']:4.2f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
