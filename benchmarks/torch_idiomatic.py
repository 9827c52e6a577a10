"""W1-W4 as a PyTorch user writes them, run with only the imports changed:
``python -m benchmarks.torch_idiomatic [--workloads W3,W4] [--rounds 3] [--steps 20]``.

The suite's W1 and W2 already are what a torch user writes (``nn.Sequential`` models); W3
and W4 there are written to compare like with like (attention spelled out, an
``nn.LSTMCell`` called in a Python loop). Here W3 is nanoGPT's shape (a causal
``F.scaled_dot_product_attention``, ``nn.GELU`` modules, ``.view``) and W4 an
``nn.LSTM(batch_first=True)`` layer, the models a torch user would reach for; the weights
and data are the suite's (``make_data``), so the first losses agree.

Each model is a function of the ``torch`` module. Under dualgraph that module is dualgraph
itself, answered by ``dualgraph.compat.install_torch_alias()`` before ``import torch``
(``torch.compile`` is then ``dg.compile``). Every (workload, mode) runs in a fresh child
process, the modes in turns round after round: ``torch`` and ``torch.compile``,
``dualgraph`` eager and ``dualgraph`` compiled. A step's time is its CPU time
(``time.thread_time``: one thread per engine, so what other processes of a shared machine
do counts less), the best of ``--steps`` steps after warm-up; reported per mode, the best
over the rounds, and compiled dualgraph's ratio to torch's eager step and to its best.
Also reported: the minor page faults a timed step takes (``ru_minflt``, fewest of the
rounds: fresh pages the allocator mapped in). Not a workload of the suite
(docs/benchmarks.md has the figures).
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import resource
import subprocess
import sys
import time

MODES = ("torch", "torch_compile", "dualgraph", "dualgraph_compiled")
WARMUP = 5


def w1(torch, data):
    from . import w1_mlp_train as w
    return w.build(torch, data)      # (nn.Sequential, SGD: already a torch user's code)


def w2(torch, data):
    from . import w2_cnn_train as w
    return w.build(torch, data)      # (LeNet as nn.Sequential, Adam)


def w3(torch, data):
    """nanoGPT's model: fused q/k/v projection, causal SDPA, GELU module, weight names
    as the suite's (its state dict loads)."""
    from . import w3_gpt_train as w
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(w.D), nn.LayerNorm(w.D)
            self.attn, self.proj = nn.Linear(w.D, 3 * w.D), nn.Linear(w.D, w.D)
            self.fc, self.fc_proj = nn.Linear(w.D, 4 * w.D), nn.Linear(4 * w.D, w.D)
            self.gelu = nn.GELU(approximate="tanh")

        def forward(self, x):
            B, T, C = x.size()
            q, k, v = self.attn(self.ln1(x)).split(C, dim=2)
            q, k, v = (t.view(B, T, w.HEADS, C // w.HEADS).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).contiguous().view(B, T, C))
            return x + self.fc_proj(self.gelu(self.fc(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(w.VOCAB, w.D), nn.Embedding(w.SEQ, w.D)
            self.blocks = nn.ModuleList([Block() for _ in range(w.LAYERS)])
            self.ln_f = nn.LayerNorm(w.D)
            self.head = nn.Linear(w.D, w.VOCAB, bias=False)

        def forward(self, idx, targets):
            pos = torch.arange(0, idx.size(1), dtype=torch.long)
            x = self.wte(idx) + self.wpe(pos)
            for block in self.blocks:
                x = block(x)
            logits = self.head(self.ln_f(x))
            return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    return _step(torch, GPT(), data, {},
                 lambda ps: torch.optim.AdamW(ps, lr=w.LR, weight_decay=w.WEIGHT_DECAY))


def w4(torch, data):
    """A character LSTM with ``nn.LSTM(batch_first=True)``: one layer, the suite's sizes."""
    from . import w4_lstm_train as w
    nn, F = torch.nn, torch.nn.functional

    class CharLSTM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(w.VOCAB, w.EMBED)
            self.lstm = nn.LSTM(w.EMBED, w.HIDDEN, batch_first=True)
            self.head = nn.Linear(w.HIDDEN, w.VOCAB)

        def forward(self, idx, targets):
            out, _ = self.lstm(self.emb(idx))
            logits = self.head(out)
            return F.cross_entropy(logits.view(-1, w.VOCAB), targets.view(-1))

    names = {f"cell.{k}": f"lstm.{k}_l0" for k in ("weight_ih", "weight_hh", "bias_ih",
                                                   "bias_hh")}
    return _step(torch, CharLSTM(), data, names, lambda ps: torch.optim.Adam(ps, lr=w.LR))


def _step(torch, model, data, names, make_optimizer):
    """``(train_step, x, y)`` for a model whose forward returns the loss; ``names`` maps the
    suite's state-dict names to the model's."""
    model.load_state_dict({names.get(k, k): torch.tensor(v) for k, v in data["params"].items()})
    opt = make_optimizer(model.parameters())

    def train_step(x, y):
        opt.zero_grad()
        loss = model(x, y)
        loss.backward()
        opt.step()
        return loss
    return train_step, torch.tensor(data["x"]), torch.tensor(data["y"])


WORKLOADS = {"W1": (w1, "w1_mlp_train"), "W2": (w2, "w2_cnn_train"),
             "W3": (w3, "w3_gpt_train"), "W4": (w4, "w4_lstm_train")}


def child(workload: str, mode: str, steps: int) -> dict:
    """In a fresh process: build, first call, warm-up, ``steps`` timed steps."""
    if mode.startswith("dualgraph"):
        import dualgraph.compat
        dualgraph.compat.install_torch_alias()
    import torch
    if not mode.startswith("dualgraph"):
        torch.set_num_threads(1)
    build, module = WORKLOADS[workload]
    data = importlib.import_module(f"benchmarks.{module}").make_data()
    fn, *args = build(torch, data)
    if mode.endswith("compile") or mode.endswith("compiled"):
        fn = torch.compile(fn)
    first = fn(*args).item()
    for _ in range(WARMUP):
        fn(*args)
    times = []
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(steps):
        t = time.thread_time()
        fn(*args)
        times.append(time.thread_time() - t)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    return {"first_loss": first, "best_ms": min(times) * 1e3,
            "median_ms": sorted(times)[len(times) // 2] * 1e3, "faults": faults / steps}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default="W1,W2,W3,W4")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(*args.child, args.steps)))
        return {}
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               MKL_NUM_THREADS="1", DUALGRAPH_NUM_THREADS="1")
    results = {}
    for workload in args.workloads.split(","):
        runs = {mode: [] for mode in args.modes.split(",")}
        for _ in range(args.rounds):
            for mode in runs:
                out = subprocess.run([sys.executable, "-m", "benchmarks.torch_idiomatic",
                                      "--steps", str(args.steps), "--child", workload, mode],
                                     env=env, capture_output=True, text=True, check=True)
                runs[mode].append(json.loads(out.stdout.strip().splitlines()[-1]))
        losses = {m: r[0]["first_loss"] for m, r in runs.items()}
        best = {m: min(x["best_ms"] for x in r) for m, r in runs.items()}
        results[workload] = {"best_ms": best, "first_loss": losses}
        ref = next(iter(losses.values()))
        agree = all(abs(v - ref) <= 1e-4 * abs(ref) for v in losses.values())
        faults = {m: min(x["faults"] for x in r) for m, r in runs.items()}
        results[workload]["faults"] = faults
        line = ", ".join(f"{m} {t:.2f}" for m, t in best.items())
        print(f"{workload}: {line} ms (CPU, best of {args.rounds} rounds x {args.steps} steps)"
              f"{'' if agree else ' FIRST LOSSES DIFFER: ' + str(losses)}")
        print("  minor page faults a step (fewest of the rounds): "
              + ", ".join(f"{m} {f:.0f}" for m, f in faults.items()))
        if "dualgraph_compiled" in best and "torch" in best:
            peers = [best[m] for m in ("torch", "torch_compile") if m in best]
            print(f"  compiled / torch eager {best['dualgraph_compiled'] / best['torch']:.2f}, "
                  f"/ best torch {best['dualgraph_compiled'] / min(peers):.2f}", flush=True)
    print(f"load average {os.getloadavg()[0]:.1f}")
    return results


if __name__ == "__main__":
    main()
