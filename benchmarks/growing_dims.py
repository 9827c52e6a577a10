"""Compiles, first calls and step time of two loops whose lengths change at every call:
``python -m benchmarks.growing_dims [--rounds 5]``.

- ``kv-decode``: 32 steps of an autoregressive decode through a small GPT-style block
  (LayerNorm, one attention head of width 64 over a KV cache grown by
  ``k = cat([k_cache, k_new], 1)`` at each step, a GELU MLP), batch 4, the cache passed in
  and returned; under ``no_grad``.
- ``seq2seq-tf``: a teacher-forced training step (``tgt[:, :-1]`` in, ``tgt[:, 1:]`` the
  targets: an embedding, a GRU-free linear decoder over a mean encoder state, a
  cross-entropy, SGD), over 24 batches whose target length cycles through 8..20.

For each: how many graphs ``dg.compile`` captured (``len(compiled.cache)``), the CPU time
of the calls that captured (trace, passes, codegen, first run) against eager's time for
those calls, and the steady step time: eager and compiled, interleaved round by round over
the whole loop again, each its best round's CPU time per step (``time.process_time``, one
thread). The same script runs on any checkout (base or branch: ``PYTHONPATH``).
"""
from __future__ import annotations

import argparse
import os

if __name__ == "__main__":   # before NumPy loads OpenBLAS
    for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "DUALGRAPH_NUM_THREADS"):
        os.environ[_name] = "1"

import time  # noqa: E402

import numpy as np  # noqa: E402

import dualgraph as dg  # noqa: E402

D, HIDDEN, BATCH, STEPS, VOCAB = 64, 256, 4, 32, 50


def kv_decode():
    """``(step, calls)``: the decode step and a function giving the loop's argument list
    (each call's cache is the previous call's output, so the loop is run by :func:`run`)."""
    dg.manual_seed(0)
    nn = dg.nn
    ln1, ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
    qkv, proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
    mlp = nn.Sequential(nn.Linear(D, HIDDEN), nn.GELU(), nn.Linear(HIDDEN, D))

    def step(x, k_cache, v_cache):
        with dg.no_grad():
            q, k, v = qkv(ln1(x)).chunk(3, dim=-1)
            k = dg.cat([k_cache, k], 1)
            v = dg.cat([v_cache, v], 1)
            att = (q @ k.transpose(1, 2) * D ** -0.5).softmax(-1)
            h = x + proj(att @ v)
            return h + mlp(ln2(h)), k, v

    rng = np.random.default_rng(0)
    xs = [dg.tensor(rng.standard_normal((BATCH, 1, D)).astype(np.float32))
          for _ in range(STEPS)]
    k0, v0 = (dg.tensor(rng.standard_normal((BATCH, 1, D)).astype(np.float32))
              for _ in range(2))

    def loop(fn):
        k, v = k0, v0
        for x in xs:
            _, k, v = fn(x, k, v)
        return k
    return step, loop


def seq2seq_tf():
    dg.manual_seed(0)
    nn = dg.nn
    emb, enc = nn.Embedding(VOCAB, D), nn.Linear(D, D)
    dec = nn.Sequential(nn.Linear(D, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, VOCAB))
    params = list(emb.parameters()) + list(enc.parameters()) + list(dec.parameters())
    opt = dg.optim.SGD(params, lr=0.05)

    def step(src, tgt):
        opt.zero_grad()
        memory = enc(emb(src)).mean(1, keepdim=True)
        inp, gold = tgt[:, :-1], tgt[:, 1:]
        logits = dec(emb(inp) + memory)
        loss = dg.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), gold.reshape(-1))
        loss.backward()
        opt.step()
        return loss.detach()

    rng = np.random.default_rng(1)
    batches = [(dg.tensor(rng.integers(0, VOCAB, (BATCH, 12))),
                dg.tensor(rng.integers(0, VOCAB, (BATCH, 8 + i % 13)))) for i in range(24)]

    def loop(fn):
        for src, tgt in batches:
            out = fn(src, tgt)
        return out
    return step, loop


WORKLOADS = {"kv-decode": kv_decode, "seq2seq-tf": seq2seq_tf}


def first_loop(step, loop) -> tuple:
    """``(graphs, capture CPU s, eager CPU s of the same calls)`` of the loop's first pass."""
    compiled = dg.compile(step)
    captured, eager_same = [0.0], [0.0]

    def timed(*args):
        before, cached = time.process_time(), len(compiled.cache) + len(compiled.records)
        out = compiled(*args)
        spent = time.process_time() - before
        if len(compiled.cache) + len(compiled.records) != cached:   # (this call captured)
            captured[0] += spent
            t0 = time.process_time()
            step(*args)
            eager_same[0] += time.process_time() - t0
        return out
    loop(timed)
    return compiled, len(compiled.cache), captured[0], eager_same[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    for name, make in WORKLOADS.items():
        step, loop = make()
        compiled, graphs, capture_s, eager_s = first_loop(step, loop)
        best = {"eager": float("inf"), "compiled": float("inf")}
        for _ in range(args.rounds):
            for label, fn in (("eager", step), ("compiled", compiled)):
                t0 = time.process_time()
                loop(fn)
                best[label] = min(best[label], time.process_time() - t0)
        calls = STEPS if name == "kv-decode" else 24
        print(f"{name}: {graphs} graphs; the calls that captured took {capture_s:.2f} s "
              f"CPU (eager: {eager_s * 1e3:.1f} ms); steady step: eager "
              f"{best['eager'] / calls * 1e6:.0f} us, compiled "
              f"{best['compiled'] / calls * 1e6:.0f} us "
              f"({best['eager'] / best['compiled']:.2f}x)")


if __name__ == "__main__":
    main()
